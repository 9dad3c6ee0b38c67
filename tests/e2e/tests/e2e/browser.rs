//! A real browser for the tests of what `lockstep serve` shows and refuses: Debian's
//! Chromium, headless, driven over WebDriver by its chromedriver; and `serve` on a free
//! loopback port.

use std::net::TcpListener;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use e2e::{Running, World, eventually};
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// WebDriver's key for an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Polls `probe` until it gives a value, for at most `limit`.
pub(crate) async fn until<T, Fut>(
    limit: Duration,
    what: &str,
    mut probe: impl FnMut() -> Fut,
) -> anyhow::Result<T>
where
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(found) = probe().await? {
            return Ok(found);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A chromedriver process and one headless Chromium session of it.
pub(crate) struct Browser {
    _driver: tokio::process::Child,
    _profile: tempfile::TempDir,
    session: String,
    http: reqwest::Client,
}

impl Browser {
    /// Starts chromedriver and a session of Chromium with `extra` flags beside the ones
    /// this machine needs.
    pub(crate) async fn start(extra: &[&str]) -> anyhow::Result<Browser> {
        for binary in [CHROMIUM, CHROMEDRIVER] {
            anyhow::ensure!(
                std::path::Path::new(binary).exists(),
                "{binary} is missing: install Debian's chromium and chromium-driver (.ci/run does)"
            );
        }
        let port = free_port()?;
        let driver = tokio::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting chromedriver")?;
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        eventually(Duration::from_secs(20), || async {
            Ok(http.get(format!("{base}/status")).send().await.is_ok())
        })
        .await?;
        let profile = tempfile::tempdir()?;
        // The flags this machine's closed network needs (no background fetches), as root.
        let profile_dir = format!("--user-data-dir={}", profile.path().display());
        let mut args = vec![
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-quic",
            "--no-first-run",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,1000",
            &profile_dir,
        ];
        args.extend_from_slice(extra);
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
            }}}))
            .send()
            .await?
            .json()
            .await?;
        let session = created["value"]["sessionId"]
            .as_str()
            .with_context(|| format!("no WebDriver session: {created}"))?;
        Ok(Browser {
            session: format!("{base}/session/{session}"),
            _driver: driver,
            _profile: profile,
            http,
        })
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> anyhow::Result<Value> {
        let mut request = self.http.request(method, format!("{}{path}", self.session));
        if !body.is_null() {
            request = request.json(&body);
        }
        let answer: Value = request.send().await?.json().await?;
        anyhow::ensure!(
            answer["value"].get("error").is_none(),
            "WebDriver {path}: {answer}"
        );
        Ok(answer["value"].clone())
    }

    pub(crate) async fn open(&self, url: &str) -> anyhow::Result<()> {
        self.call(reqwest::Method::POST, "/url", json!({"url": url}))
            .await
            .map(drop)
    }

    pub(crate) async fn script(&self, script: &str) -> anyhow::Result<Value> {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            json!({"script": script, "args": []}),
        )
        .await
    }

    pub(crate) async fn type_into(&self, css: &str, text: &str) -> anyhow::Result<()> {
        let element = self.element(css).await?;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/value"),
            json!({"text": text}),
        )
        .await
        .map(drop)
    }

    pub(crate) async fn click(&self, css: &str) -> anyhow::Result<()> {
        let element = self.element(css).await?;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/click"),
            json!({}),
        )
        .await
        .map(drop)
    }

    async fn element(&self, css: &str) -> anyhow::Result<String> {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await?;
        found[ELEMENT]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("no element {css}: {found}"))
    }

    /// Ends the session, and with it Chromium; dropping the browser ends chromedriver.
    pub(crate) async fn close(self) -> anyhow::Result<()> {
        self.http.delete(&self.session).send().await?;
        Ok(())
    }

    pub(crate) async fn screenshot(&self) -> anyhow::Result<Vec<u8>> {
        use base64::Engine as _;
        let png = self
            .call(reqwest::Method::GET, "/screenshot", Value::Null)
            .await?;
        Ok(base64::engine::general_purpose::STANDARD
            .decode(png.as_str().context("a base64 screenshot")?)?)
    }
}

/// `lockstep serve` on a free loopback port, with `args` added.
pub(crate) async fn serve(
    world: &World,
    args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<(Running, String)> {
    let listen = format!("127.0.0.1:{}", free_port()?);
    let mut all = vec!["serve", "--listen", listen.as_str()];
    all.extend_from_slice(args);
    let running = world.spawn(&all, env)?;
    let base = format!("http://{listen}");
    let http = reqwest::Client::new();
    eventually(Duration::from_secs(30), || async {
        Ok(http.get(format!("{base}/healthz")).send().await.is_ok())
    })
    .await?;
    Ok((running, base))
}
