//! The status page of `lockstep serve` in a real browser: Debian's Chromium, headless,
//! driven over WebDriver by its chromedriver. One restore finished and one held (by an
//! approval-gate check nobody approves), each run by its own `lockstep run`; the page is served
//! by a third process that runs neither, so what it shows of the running restore came
//! through the journal's progress snapshot, as on any host of a fleet.
//!
//! `LOCKSTEP_STATUS_SCREENSHOT=FILE` keeps a screenshot of the page.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use e2e::{TARGET, World, WorldSpec, plugin, secondary};
use serde_json::Value;

use crate::browser::{Browser, serve, until};

/// The restore cards as the page drew them: id, class, and per end its cells.
async fn cards_on(browser: &Browser) -> anyhow::Result<Vec<Value>> {
    let cards = browser
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
    // What the data imports show on each end (the page's rows): a two-phase restore folds
    // the L0 deletes into them, so they count the live rows.
    let rows = world.rows_after_deletes();
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
    // The record says who asked for the restore: `lockstep run` of its job file.
    assert_eq!(
        record["requested_by"],
        serde_json::json!({"source": "cli", "file": held.to_str()}),
        "{record}"
    );
    let snapshot = &record["progress"];
    assert_eq!(snapshot["rows_expected"], rows, "{snapshot}");
    assert_eq!(snapshot["rows_exact"], true, "{snapshot}");
    assert_eq!(snapshot["ends"][0]["end"], TARGET, "{snapshot}");

    let (_server, base) = serve(&world, &[], &[]).await?;
    let browser = Browser::start(&[]).await?;
    browser.open(&format!("{base}/")).await?;
    let cards = until(
        Duration::from_secs(20),
        "both restores on the page",
        || async {
            let cards = cards_on(&browser).await?;
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

    let token = "page-token-7d1f-2c9a";
    let (_server, base) = serve(
        &world,
        &["--token-env", "PAGE_TOKEN"],
        &[("PAGE_TOKEN", token)],
    )
    .await?;
    let browser = Browser::start(&[]).await?;
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
        cards_on(&browser).await?.is_empty(),
        "nothing shown without the token"
    );

    browser.type_into("#token", token).await?;
    browser.click("#auth button").await?;
    let cards = until(
        Duration::from_secs(20),
        "the restore drawn with the token",
        || async {
            let cards = cards_on(&browser).await?;
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
        || async { Ok((cards_on(&browser).await?.len() == 1).then_some(())) },
    )
    .await?;
    let asked = browser
        .script("return getComputedStyle(document.getElementById('auth')).display")
        .await?;
    assert_eq!(asked, "none");
    browser.close().await
}
