//! A connection that sends nothing after a deadline. A host's fence check proves its claim
//! held when it asked, and that proof is good for a quarter of the lease (DESIGN.md §2.1);
//! a host paused between the check and its call would otherwise send the call whenever it
//! wakes, the restore long since another host's. The deadline is checked where bytes are
//! handed to the socket, after every task hop a request takes inside the client, so what a
//! pause can still slip through is the few instructions from that check to the write.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use hyper::rt;
use tonic::transport::Uri;

/// A connector whose connections write nothing after `until`.
#[derive(Clone)]
pub(super) struct Gated<C> {
    pub inner: C,
    pub until: Instant,
}

impl<C> tower::Service<Uri> for Gated<C>
where
    C: tower::Service<Uri> + Send,
    C::Response: rt::Read + rt::Write + Unpin + Send + 'static,
    C::Future: Send + 'static,
{
    type Response = GatedIo<C::Response>;
    type Error = C::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let until = self.until;
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            let io = connecting.await?;
            Ok(GatedIo { io, until })
        })
    }
}

/// A connection that fails every write after `until`.
pub(super) struct GatedIo<T> {
    io: T,
    until: Instant,
}

impl<T> GatedIo<T> {
    fn shut(&self) -> Option<std::io::Error> {
        (Instant::now() > self.until).then(|| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the fence check this call rests on is too old to act on",
            )
        })
    }
}

impl<T: rt::Read + Unpin> rt::Read for GatedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: rt::Write + Unpin> rt::Write for GatedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if let Some(e) = self.shut() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if let Some(e) = self.shut() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hyper_util::rt::TokioIo;
    use tokio::io::AsyncReadExt as _;

    use super::*;

    async fn write(until: Instant) -> (std::io::Result<usize>, Vec<u8>) {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut gated = GatedIo {
            io: TokioIo::new(ours),
            until,
        };
        let wrote =
            std::future::poll_fn(|cx| rt::Write::poll_write(Pin::new(&mut gated), cx, b"drop"))
                .await;
        drop(gated);
        let mut got = Vec::new();
        theirs.read_to_end(&mut got).await.unwrap();
        (wrote, got)
    }

    #[tokio::test]
    async fn bytes_leave_before_the_deadline_and_none_after() {
        let (wrote, got) = write(Instant::now() + Duration::from_secs(60)).await;
        assert_eq!(wrote.unwrap(), 4);
        assert_eq!(got, b"drop");
        let (wrote, got) = write(Instant::now() - Duration::from_millis(1)).await;
        assert_eq!(wrote.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
        assert!(got.is_empty());
    }
}
