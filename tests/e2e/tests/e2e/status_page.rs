//! The status page of `lockstep serve` in a real browser: Debian's Chromium, headless,
//! driven over WebDriver by its chromedriver. One restore finished and one held (by an
//! approval-gate check nobody approves), each run by its own `lockstep run`; the page is served
//! by a third process that runs neither, so what it shows of the running restore came
//! through the journal's progress snapshot, as on any host of a fleet.
//!
//! `LOCKSTEP_STATUS_SCREENSHOT=FILE` keeps a screenshot of the page.

use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use e2e::{Running, TARGET, World, WorldSpec, eventually, plugin, secondary};
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// WebDriver's key for an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Polls `probe` until it gives a value, for at most `limit`.
async fn until<T, Fut>(
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

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A chromedriver process and one headless Chromium session of it.
struct Browser {
    _driver: tokio::process::Child,
    _profile: tempfile::TempDir,
    session: String,
    http: reqwest::Client,
}

impl Browser {
    async fn start() -> anyhow::Result<Browser> {
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
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-quic",
            "--no-first-run",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,1000",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
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

    async fn open(&self, url: &str) -> anyhow::Result<()> {
        self.call(reqwest::Method::POST, "/url", json!({"url": url}))
            .await
            .map(drop)
    }

    async fn script(&self, script: &str) -> anyhow::Result<Value> {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            json!({"script": script, "args": []}),
        )
        .await
    }

    async fn type_into(&self, css: &str, text: &str) -> anyhow::Result<()> {
        let element = self.element(css).await?;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/value"),
            json!({"text": text}),
        )
        .await
        .map(drop)
    }

    async fn click(&self, css: &str) -> anyhow::Result<()> {
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
    async fn close(self) -> anyhow::Result<()> {
        self.http.delete(&self.session).send().await?;
        Ok(())
    }

    async fn screenshot(&self) -> anyhow::Result<Vec<u8>> {
        use base64::Engine as _;
        let png = self
            .call(reqwest::Method::GET, "/screenshot", Value::Null)
            .await?;
        Ok(base64::engine::general_purpose::STANDARD
            .decode(png.as_str().context("a base64 screenshot")?)?)
    }

    /// The restore cards as the page drew them: id, class, and per end its cells.
    async fn cards(&self) -> anyhow::Result<Vec<Value>> {
        let cards = self
            .script(
                "return [...document.querySelectorAll('.restore')].map(card => ({
                    id: card.dataset.id,
                    class: card.className,
                    text: card.innerText,
                    json: card.querySelector('a.json').getAttribute('href'),
                    ends: [...card.querySelectorAll('tr.end')].map(row =>
                        [...row.querySelectorAll('td')].map(td => td.innerText)),
                }))",
            )
            .await?;
        Ok(cards.as_array().cloned().unwrap_or_default())
    }
}

/// `lockstep serve` on a free loopback port, with `args` added.
async fn serve(
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

fn number(cell: &Value) -> i64 {
    let digits: String = cell
        .as_str()
        .unwrap_or_default()
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_status_page_shows_a_finished_and_a_running_restore_in_a_real_browser()
-> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    world.share_plugin_cache(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache"))?;
    // What the data imports show on each end (the page's rows); L0 deletes come after.
    let rows = world.backup.rows_of_data_imports() as i64;
    let finished = world.job("finished", "[restore]\nsuffix = \"_done\"\n")?;
    let done = world.run(&["run", finished.to_str().unwrap()], &[]).await?;
    assert_eq!(done.code, 0, "{}", done.explain());
    let done_id = done.report["restore_id"]
        .as_str()
        .context("restore id")?
        .to_owned();

    // Held before its commit by an approval nobody gives.
    let held = world.job(
        "held",
        &format!(
            "[[check]]\nplugin = \"{}\"\nphase = \"before-commit\"\nmax_wait_ms = 600000\n\
             config = {{ object = \"approvals/never\", poll = \"100ms\" }}\n",
            plugin("approval-gate")?.display()
        ),
    )?;
    let _running = world.spawn(&["run", held.to_str().unwrap()], &[])?;

    // The running restore's record carries its progress snapshot: every job held on every
    // end, with its rows.
    let journal = world.path("state/journal");
    let ends = 1 + world.spec.secondaries;
    let record = until(
        Duration::from_secs(90),
        "the held restore's jobs in its record",
        || {
            let journal = journal.clone();
            async move {
                for entry in std::fs::read_dir(&journal)? {
                    let path = entry?.path();
                    if path.extension().is_none_or(|e| e != "json") {
                        continue;
                    }
                    let Ok(record) = serde_json::from_slice::<Value>(&std::fs::read(&path)?) else {
                        continue;
                    };
                    let snapshot = &record["progress"]["ends"];
                    let held = (0..ends).all(|e| {
                        snapshot[e]["jobs"]
                            .as_object()
                            .is_some_and(|j| j.len() == 1 && j.contains_key("Uncommitted"))
                            && snapshot[e]["rows_imported"] == rows
                    });
                    if record["job_name"] == "held" && held {
                        return Ok(Some(record));
                    }
                }
                Ok(None)
            }
        },
    )
    .await?;
    let held_id = record["id"].as_str().context("id")?.to_owned();
    let snapshot = &record["progress"];
    assert_eq!(snapshot["rows_expected"], rows, "{snapshot}");
    assert_eq!(snapshot["rows_exact"], true, "{snapshot}");
    assert_eq!(snapshot["ends"][0]["end"], TARGET, "{snapshot}");

    let (_server, base) = serve(&world, &[], &[]).await?;
    let browser = Browser::start().await?;
    browser.open(&format!("{base}/")).await?;
    let cards = until(
        Duration::from_secs(20),
        "both restores on the page",
        || async {
            let cards = browser.cards().await?;
            Ok((cards.len() == 2).then_some(cards))
        },
    )
    .await?;
    if let Some(path) = std::env::var_os("LOCKSTEP_STATUS_SCREENSHOT") {
        std::fs::write(path, browser.screenshot().await?)?;
    }

    // Running first, with its phase and each end's jobs and rows.
    let (running, finished) = (&cards[0], &cards[1]);
    assert_eq!(running["id"], held_id.as_str(), "{cards:?}");
    assert!(
        running["class"].as_str().unwrap().contains("running"),
        "{running}"
    );
    let text = running["text"].as_str().unwrap();
    assert!(text.contains("phase: holding"), "{text}");
    let drawn = running["ends"].as_array().unwrap();
    let names: Vec<String> = std::iter::once(TARGET.to_owned())
        .chain((0..world.spec.secondaries).map(secondary))
        .collect();
    assert_eq!(drawn.len(), names.len(), "{running}");
    for (row, end) in drawn.iter().zip(&names) {
        assert_eq!(row[0], end.as_str(), "{running}");
        assert_eq!(number(&row[3]), rows, "expected rows on {end}: {running}");
    }
    for row in drawn {
        assert!(
            row[1].as_str().unwrap().ends_with("Uncommitted"),
            "{running}"
        );
        assert_eq!(number(&row[2]), rows, "{running}");
    }

    // Finished: succeeded, every job Completed and every row on every end.
    assert_eq!(finished["id"], done_id.as_str(), "{cards:?}");
    assert!(
        finished["class"].as_str().unwrap().contains("succeeded"),
        "{finished}"
    );
    let drawn = finished["ends"].as_array().unwrap();
    assert_eq!(drawn.len(), names.len(), "{finished}");
    for row in drawn {
        assert!(
            row[1].as_str().unwrap().ends_with("Completed"),
            "{finished}"
        );
        assert_eq!(number(&row[2]), rows, "{finished}");
        assert_eq!(number(&row[3]), rows, "{finished}");
    }
    // Its JSON link is the API's view of it.
    let json_url = format!("{base}{}", finished["json"].as_str().unwrap());
    let view: Value = reqwest::get(&json_url).await?.json().await?;
    assert_eq!(view["data"]["id"], done_id.as_str(), "{view}");
    browser.close().await
}

/// Off loopback a server needs its token, so the page asks for it once and sends it with
/// every call to the API; without it, it shows nothing.
#[tokio::test(flavor = "multi_thread")]
async fn the_status_page_asks_once_for_the_token_of_a_server_that_needs_one() -> anyhow::Result<()>
{
    let world = World::start(WorldSpec::default()).await?;
    let job = world.job("tokened", "")?;
    let done = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(done.code, 0, "{}", done.explain());

    let token = "page-token-7d1f";
    let (_server, base) = serve(
        &world,
        &["--token-env", "PAGE_TOKEN"],
        &[("PAGE_TOKEN", token)],
    )
    .await?;
    let browser = Browser::start().await?;
    browser.open(&format!("{base}/")).await?;
    until(
        Duration::from_secs(20),
        "the page asking for the token",
        || async {
            let shown = browser
                .script("return getComputedStyle(document.getElementById('auth')).display")
                .await?;
            Ok((shown == "block").then_some(()))
        },
    )
    .await?;
    assert!(
        browser.cards().await?.is_empty(),
        "nothing shown without the token"
    );

    browser.type_into("#token", token).await?;
    browser.click("#auth button").await?;
    let cards = until(
        Duration::from_secs(20),
        "the restore drawn with the token",
        || async {
            let cards = browser.cards().await?;
            Ok((cards.len() == 1).then_some(cards))
        },
    )
    .await?;
    assert!(
        cards[0]["class"].as_str().unwrap().contains("succeeded"),
        "{cards:?}"
    );
    // Asked once: a reload keeps the token for the tab and draws without asking.
    browser.open(&format!("{base}/")).await?;
    until(
        Duration::from_secs(20),
        "the restore drawn again",
        || async { Ok((browser.cards().await?.len() == 1).then_some(())) },
    )
    .await?;
    let asked = browser
        .script("return getComputedStyle(document.getElementById('auth')).display")
        .await?;
    assert_eq!(asked, "none");
    browser.close().await
}
