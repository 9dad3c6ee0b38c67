//! Web pages against `lockstep serve` on loopback, in the status page's real browser. A
//! page of another origin (another loopback port) posts a restore that drops collections,
//! as a form (`enctype="text/plain"`, which turns a field into a JSON body) and with
//! `fetch(..., {mode: "no-cors"})`: neither needs the server's leave, and both used to
//! start the restore. A page under a name rebound to the server's address (DNS rebinding,
//! played by Chromium's host resolver rules) reads the restores as its own. Each is
//! refused with 403 now, and nothing runs.

use std::time::Duration;

use anyhow::Context as _;
use e2e::{TARGET, World, WorldSpec, secondary};
use serde_json::Value;

use crate::browser::{Browser, serve, until};

/// A restore of the world's backup that drops what is there, as JSON without its last two
/// characters (`"}`), for a form to complete.
fn restore_body_but_its_end(world: &World, suffix: &str) -> String {
    let secondaries: Vec<String> = (0..world.spec.secondaries)
        .map(|i| format!("\"{}\"", secondary(i)))
        .collect();
    format!(
        r#"{{"backup_name":"{}","target":"{TARGET}","secondaries":[{}],"dropExistCollection":true,"collection_suffix":"{suffix}","requestId":"x"#,
        world.spec.backup.name,
        secondaries.join(",")
    )
}

/// The attacker's pages on a loopback port of their own: `/form` posts the restore as a
/// `text/plain` form once asked to, `/fetch` posts it with a `no-cors` fetch at once and
/// says when the browser is done with it (`window.done`).
async fn attacker_pages(world: &World, target: &str) -> anyhow::Result<String> {
    let action = format!("{target}/api/v1/restore");
    // A text/plain form sends `name=value`: the name is the JSON up to the request id's
    // value, the value ends it, and the `=` between lands inside the id.
    let form = format!(
        "<!doctype html><form id=\"f\" method=\"POST\" action=\"{action}\" enctype=\"text/plain\">\
         <input name='{}' value='\"}}'></form>",
        restore_body_but_its_end(world, "_form")
    );
    let body = format!("{}\"}}", restore_body_but_its_end(world, "_fetch"));
    let fetch = format!(
        "<!doctype html><script>fetch({}, {{mode: \"no-cors\", method: \"POST\", body: {}}})\
         .then(r => window.done = \"answered \" + r.type, e => window.done = \"failed \" + e);\
         </script>",
        serde_json::to_string(&action)?,
        serde_json::to_string(&body)?
    );
    let app = axum::Router::new()
        .route(
            "/form",
            axum::routing::get(|| async { axum::response::Html(form) }),
        )
        .route(
            "/fetch",
            axum::routing::get(|| async { axum::response::Html(fetch) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(base)
}

/// The status of the page the browser shows once its address starts with `prefix`.
async fn shown_status(browser: &Browser, prefix: &str) -> anyhow::Result<i64> {
    let script = format!(
        "return location.href.startsWith({}) \
         ? performance.getEntriesByType('navigation')[0].responseStatus : null",
        serde_json::to_string(prefix)?
    );
    until(Duration::from_secs(30), "the answer shown", || async {
        // A script asked while the page is being replaced fails: ask again.
        Ok(browser.script(&script).await.ok().and_then(|s| s.as_i64()))
    })
    .await
}

async fn page_text(browser: &Browser) -> anyhow::Result<String> {
    let text = browser.script("return document.body.innerText").await?;
    Ok(text.as_str().unwrap_or_default().to_owned())
}

/// The restores `list_restores` shows to a client that names the server as it is.
async fn restores(base: &str) -> anyhow::Result<Vec<Value>> {
    let list: Value = reqwest::get(format!("{base}/api/v1/list_restores"))
        .await?
        .json()
        .await?;
    list["data"].as_array().cloned().context("a list")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_of_another_origin_cannot_post_a_restore_as_a_form_or_a_no_cors_fetch()
-> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let (mut server, base) = serve(&world, &[], &[]).await?;
    let pages = attacker_pages(&world, &base).await?;
    let browser = Browser::start(&[]).await?;

    // The fetch's answer is opaque to the page: the server's log says what it was.
    browser.open(&format!("{pages}/fetch")).await?;
    let done = until(Duration::from_secs(30), "the page's fetch", || async {
        let done = browser.script("return window.done || null").await?;
        Ok(done.as_str().map(str::to_owned))
    })
    .await?;
    assert_eq!(done, "answered opaque");
    server
        .wait_for_log("refused a request", 1, Duration::from_secs(30))
        .await?;
    let log = server.log();
    let refusal = log
        .lines()
        .find(|l| l.contains("refused a request"))
        .context("the refusal")?;
    assert!(
        refusal.contains("status=403") && refusal.contains(&pages),
        "{refusal}"
    );

    // The form's answer is shown as a page.
    browser.open(&format!("{pages}/form")).await?;
    browser
        .script("document.getElementById('f').submit(); return null")
        .await?;
    assert_eq!(shown_status(&browser, &base).await?, 403);
    let text = page_text(&browser).await?;
    assert!(
        text.contains("is not this server's") && text.contains(&pages),
        "{text}"
    );

    assert_eq!(restores(&base).await?, Vec::<Value>::new(), "nothing ran");
    assert!(world.writes_received().await?.is_empty());
    browser.close().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_under_a_rebound_name_reads_no_restore() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let job = world.job("rebound", "")?;
    let done = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(done.code, 0, "{}", done.explain());
    let id = done.report["restore_id"]
        .as_str()
        .context("restore id")?
        .to_owned();
    let (_server, base) = serve(&world, &[], &[]).await?;
    let port = base.rsplit(':').next().context("a port")?;
    // evil.example resolves to this loopback address, as the attacker's DNS answers once
    // its page is loaded; the browser then sends its requests here as that page's own.
    let browser = Browser::start(&[
        "--host-resolver-rules=MAP evil.example 127.0.0.1",
        "--disable-features=HttpsUpgrades",
    ])
    .await?;

    // The control: under the server's own name the restore is there.
    browser
        .open(&format!("{base}/api/v1/list_restores"))
        .await?;
    assert_eq!(shown_status(&browser, &base).await?, 200);
    assert!(page_text(&browser).await?.contains(&id));

    let rebound = format!("http://evil.example:{port}");
    for path in ["/api/v1/list_restores", "/"] {
        browser.open(&format!("{rebound}{path}")).await?;
        assert_eq!(shown_status(&browser, &rebound).await?, 403, "{path}");
        let text = page_text(&browser).await?;
        assert!(
            text.contains("DNS rebinding") && !text.contains(&id),
            "{path}: {text}"
        );
    }
    browser.close().await
}
