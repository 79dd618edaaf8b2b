//! The dashboard (SPEC section 11) in a real headless Chromium, driven through WebDriver,
//! against real daemons: it shows the machine's resources (with what else runs on a card)
//! and its queue, follows a change within 2 s without a reload, moves and cancels jobs,
//! releases a real Attention and says a stale release's refusal in words, asks for the web
//! token once, and cannot be driven from a page of another origin. Screenshots at 1280 and
//! 390 px wide are saved under `target/screenshots` (or `$HOMEBASED_SCREENSHOTS`).
//!
//! Chromium and chromedriver must be installed (Debian `chromium`, `chromium-driver`): the
//! tests fail, with that message, where they are not.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::attention;
use crate::common::gpus::{card_uuid, compute_apps, set_cards, set_gpu_state};
use crate::common::http::free_port;
use crate::common::jobs::{show, wait_job, wait_phase};
use crate::common::webdriver;
use crate::common::{wait_until, Probe, TestHome};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use webdriver::{screenshot_dir, wait_for, wait_within, Browser};

/// How soon the page must show a change (SPEC section 11).
const FOLLOWS_WITHIN: Duration = Duration::from_secs(2);

/// A web listener on a free loopback port for `h` (with `extra` in `[web]`); its URL.
fn listen(h: &mut TestHome, extra: &str, more: &str) -> String {
    let addr = format!("127.0.0.1:{}", free_port());
    h.use_config(&format!("[web]\nlisten = \"{addr}\"\n{extra}\n{more}"));
    format!("http://{addr}")
}

/// The job UUIDs the page lists, in its order (levels from high to low).
fn page_jobs(b: &Browser) -> Vec<String> {
    b.script(
        "return [...document.querySelectorAll('tr[data-job]')].map(r => r.dataset.job);",
        json!([]),
    )
    .as_array()
    .unwrap()
    .iter()
    .map(|v| v.as_str().unwrap().to_string())
    .collect()
}

fn row(job: &str) -> String {
    format!("tr[data-job=\"{job}\"]")
}

/// Waits until the page's notice says something containing `words`; answers it.
fn wait_notice(b: &Browser, words: &str) -> String {
    wait_for(&format!("a notice saying {words:?}"), || {
        let text = b.text("#notice:not([hidden])");
        text.contains(words).then_some(text)
    })
}

fn queue_ids(h: &TestHome) -> Vec<String> {
    h.queue().into_iter().map(|(id, _, _)| id).collect()
}

#[test]
fn the_page_shows_the_daemons_resources_and_queue_and_a_new_job_within_two_seconds() {
    let mut h = TestHome::new(Probe::Gpus(2));
    set_cards(&h, &[0, 1]);
    let url = listen(&mut h, "", "");
    h.start_daemon();
    // Two runs that print a line every 200 ms, and one job that waits for a lane.
    let ticking = "i=0; while [ $i -lt 3000 ]; do echo \"tick $i\"; i=$((i+1)); sleep 0.2; done";
    let first = h.submit(&h.spec("train-resnet").command(&["/bin/sh", "-c", ticking]));
    let second = h.submit(
        &h.spec("eval-llama")
            .priority("high")
            .command(&["/bin/sh", "-c", ticking]),
    );
    let run = wait_phase(&h, &first, "executing");
    wait_phase(&h, &second, "executing");
    let waiting = h.submit(&h.spec("sweep-lr").priority("low"));
    // A hand-started server (this test process) on the card the first run does not use.
    let other_card = if run["name"] == "gpu0" { 1 } else { 0 };
    std::fs::write(
        compute_apps(&h),
        format!("{}, {}, 2048\n", card_uuid(other_card), std::process::id()),
    )
    .unwrap();

    let b = Browser::start(1280, 900);
    b.goto(&format!("{url}/"));
    // The machine, every resource with its card and its run, and the queue.
    let status = h.json(&["daemon", "status"]);
    let machine = status["machine"].as_str().unwrap();
    wait_for("the machine's UUID in the header", || {
        let header = b.text("#machine");
        header
            .contains(&machine[..8])
            .then_some(())
            .filter(|()| header.contains("socket up"))
    });
    assert!(
        b.script(
            "return document.querySelector('#machine .id').title;",
            json!([])
        ) == json!(machine),
        "the header names the full UUID"
    );
    wait_for("both lanes running their jobs", || {
        let cards = b.text("article.resource");
        (cards.contains("train-resnet") && cards.contains("eval-llama")).then_some(())
    });
    let cards = b.text("article.resource");
    for words in ["gpu0", "gpu1", "NVIDIA H200", "executing for", "device 0"] {
        assert!(cards.contains(words), "{words:?} not in {cards}");
    }
    let task = run["run"]["task"].as_str().unwrap();
    assert!(cards.contains(&task[..8]), "the run's task: {cards}");
    let foreign = wait_for("the foreign process on the other card", || {
        let text = b.text(&format!("article[data-name=\"gpu{other_card}\"] .foreign"));
        text.contains(&format!("pid {}", std::process::id()))
            .then_some(text)
    });
    assert!(foreign.contains("2048 MiB"), "{foreign}");
    wait_for("the queue in serving order", || {
        (page_jobs(&b) == [second.clone(), first.clone(), waiting.clone()]).then_some(())
    });
    let queued = b.text(&row(&waiting));
    assert!(
        queued.contains("queued") && queued.contains("busy with work it may not stop"),
        "{queued}"
    );
    assert!(
        b.text("table[data-level=\"low\"] caption")
            .to_lowercase()
            .contains("low"),
        "grouped by level"
    );

    // A job submitted on the socket shows within 2 s, without a reload.
    let marker: Value = b.script("window.__same_page = 1; return 1;", json!([]));
    assert_eq!(marker, 1);
    let late = h.submit(&h.spec("late-arrival"));
    let submitted = Instant::now();
    wait_within("the new job on the page", FOLLOWS_WITHIN, || {
        page_jobs(&b).contains(&late).then_some(())
    });
    eprintln!("the new job showed after {:?}", submitted.elapsed());
    assert_eq!(
        b.script("return window.__same_page;", json!([])),
        1,
        "no reload"
    );

    // A job's detail: its run with its task UUID, its events, and its log, followed.
    b.click(&format!("{} td.name a", row(&first)));
    wait_for("the job's run in the detail", || {
        b.find(&format!("#detail tr[data-task=\"{task}\"]"))
    });
    assert!(
        b.text("#detail h3").contains("Events (0)"),
        "a running job has no events yet"
    );
    let before = wait_for("the run's output", || {
        let log = b.text("#log");
        log.contains("tick").then_some(log)
    });
    let last = |log: &str| -> u64 {
        log.lines()
            .filter_map(|l| l.strip_prefix("tick ")?.trim().parse().ok())
            .max()
            .unwrap_or(0)
    };
    let seen = last(&before);
    wait_for("the log to follow the run", || {
        (last(&b.text("#log")) > seen + 3).then_some(())
    });

    // Screenshots, wide and narrow: the detail closed, the foreign process shown.
    b.click("#detail-close");
    let dir = screenshot_dir();
    b.screenshot(&dir.join("dashboard-1280.png"), 1280);
    b.set_size(390, 844);
    b.screenshot(&dir.join("dashboard-390.png"), 390);
    for name in ["dashboard-1280.png", "dashboard-390.png"] {
        let png = std::fs::read(dir.join(name)).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{name} is a PNG");
    }
    // Nothing spills sideways down to 360 px: the page is as wide as the window.
    for width in [390, 360] {
        b.set_size(width, 800);
        let overflow = b.script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
            json!([]),
        );
        assert!(
            overflow.as_i64().unwrap() <= 0,
            "{overflow} px too wide at {width} px"
        );
    }
}

#[test]
fn front_level_and_cancel_from_the_page_change_the_real_queue() {
    let mut h = TestHome::without_resources();
    let url = listen(&mut h, "", "");
    h.start_daemon();
    let jobs: Vec<String> = ["first", "second", "third"]
        .iter()
        .map(|n| h.submit(&h.spec(n)))
        .collect();
    let b = Browser::start(1280, 900);
    b.goto(&format!("{url}/"));
    wait_for("the three jobs", || (page_jobs(&b) == jobs).then_some(()));
    assert!(b
        .text(&row(&jobs[0]))
        .contains("this machine has no resource it may use"));

    // Move to front: the daemon's queue and then the page put the third job first.
    b.click(&format!("{} [data-action=front]", row(&jobs[2])));
    wait_until("the third job first in the real queue", || {
        queue_ids(&h)[0] == jobs[2]
    });
    let reordered = vec![jobs[2].clone(), jobs[0].clone(), jobs[1].clone()];
    wait_for("the page in the new order", || {
        (page_jobs(&b) == reordered).then_some(())
    });
    wait_notice(&b, "moved to the front");

    // Change level: the first job goes to high.
    b.click(&format!(
        "{} select[data-action=level] option[value=high]",
        row(&jobs[0])
    ));
    wait_until("the first job at high", || {
        h.queue()
            .iter()
            .any(|(id, level, _)| id == &jobs[0] && level == "high")
    });
    wait_for("the page's high group", || {
        b.find(&format!("table[data-level=high] {}", row(&jobs[0])))
    });

    // Back of its level, among the two medium jobs.
    b.click(&format!("{} [data-action=back]", row(&jobs[2])));
    wait_until("the third job behind the second", || {
        queue_ids(&h) == [jobs[0].clone(), jobs[1].clone(), jobs[2].clone()]
    });

    // Cancel takes two clicks; the job is cancelled and leaves the page.
    let cancel = format!("{} [data-action=cancel]", row(&jobs[1]));
    b.click(&cancel);
    assert_eq!(
        b.text(&cancel),
        "Confirm cancel",
        "one click only arms the button"
    );
    h.settle();
    assert_eq!(show(&h, &jobs[1])["state"]["state"], "queued");
    b.click(&cancel);
    wait_job(&h, &jobs[1], "cancelled");
    wait_for("the cancelled job gone from the page", || {
        (!page_jobs(&b).contains(&jobs[1])).then_some(())
    });
    // Each write carried its own operation id: three moves and one cancel, no repeats.
    let shown = show(&h, &jobs[1]);
    assert_eq!(shown["state"]["state"], "cancelled", "{shown}");
}

#[test]
fn release_clears_a_real_attention_and_a_stale_release_is_refused_in_words() {
    let addr = format!("127.0.0.1:{}", free_port());
    let Some(held) = attention::Held::new(&format!("[web]\nlisten = \"{addr}\"\n")) else {
        return;
    };
    let b = Browser::start(1280, 900);
    b.goto(&format!("http://{addr}/"));
    let button = format!(
        "button[data-action=release][data-attention=\"{}\"]",
        held.attention
    );
    wait_for("the Attention with its Release button", || b.find(&button));
    let card = b.text("article[data-name=gpu0]");
    let suspect = held.resource["run"]["phase"]["failure"]["remaining"][0]["pid"]
        .as_u64()
        .unwrap();
    assert!(
        card.contains("unreadable_suspects") && card.contains(&format!("pid {suspect}")),
        "{card}"
    );
    assert!(card.contains(&held.attention[..8]), "{card}");
    // Its job ended (its step exited 0), so it is not in the queue: named all the same.
    wait_for("the held run's job named", || {
        b.text("article[data-name=gpu0]")
            .contains("leaves-an-unreadable-process")
            .then_some(())
    });

    // Keep this page stale (its resource reads fail), as a second screen left behind would
    // be, so that the same button can be pressed again after the release.
    b.cdp("Network.enable", json!({}));
    b.cdp(
        "Network.setBlockedURLs",
        json!({"urls": ["*/v1/resources*"]}),
    );
    wait_for("the page to notice it is stale", || {
        b.text("#live").contains("unreachable").then_some(())
    });
    let element = b.find(&button).expect("the stale page keeps its button");
    b.try_click(&element).unwrap();
    wait_notice(&b, "Released gpu0");
    let gpu0 = common::jobs::wait_idle(&held.h, "gpu0");
    assert!(gpu0["run"].is_null(), "{gpu0}");

    // The same button again: that Attention is gone, and the page says so in words.
    b.try_click(&element).unwrap();
    let refused = wait_notice(&b, "attention_not_found");
    assert!(refused.contains("Refused"), "{refused}");
    let stale = held
        .h
        .json_err(&["resource", "release", "--attention", &held.attention], 3);
    let message = stale["message"].as_str().unwrap();
    assert!(
        refused.contains(message),
        "the page shows the daemon's message {message:?}: {refused}"
    );

    // Reads again: the card shows the lane idle, without the button.
    b.cdp("Network.setBlockedURLs", json!({"urls": []}));
    wait_for("gpu0 idle on the page", || {
        (b.find(&button).is_none() && b.text("article[data-name=gpu0] .phase") == "idle")
            .then_some(())
    });
    let _ = &held.job;
}

#[test]
fn a_page_on_another_origin_cannot_write() {
    let mut h = TestHome::without_resources();
    let url = listen(&mut h, "", "");
    h.start_daemon();
    let job = h.submit(&h.spec("keep-me"));
    let b = Browser::start(1280, 900);
    // The same listener by another name is another origin: http://localhost:<port>.
    let other = url.replace("127.0.0.1", "localhost");
    b.goto(&format!("{other}/"));
    wait_for("the other origin's page", || {
        b.text("#live").contains("updated").then_some(())
    });
    let target = format!("{url}/v1/jobs/{job}/cancel");
    let outcome = b.async_script(
        r#"const [target, done] = [arguments[0], arguments[arguments.length - 1]];
        const body = JSON.stringify({operation_id: crypto.randomUUID()});
        const out = {};
        fetch(target, {method: "POST", headers: {"Content-Type": "application/json"}, body})
          .then(r => { out.json = r.status; }, e => { out.json = "blocked: " + e.name; })
          .then(() => fetch(target, {method: "POST", mode: "no-cors",
                                     headers: {"Content-Type": "text/plain"}, body}))
          .then(r => { out.plain = r.type; }, e => { out.plain = "blocked: " + e.name; })
          .then(() => done(out));"#,
        json!([target]),
    );
    // JSON needs a preflight, which the listener refuses; a "simple" text/plain request
    // arrives, with the other Origin, and is refused by the same-origin guard.
    assert_eq!(outcome["json"], "blocked: TypeError", "{outcome}");
    h.settle();
    assert_eq!(show(&h, &job)["state"]["state"], "queued", "{outcome}");
    // The same write from the page's own origin works.
    b.goto(&format!("{url}/"));
    b.click(&format!("{} [data-action=cancel]", row(&job)));
    b.click(&format!("{} [data-action=cancel]", row(&job)));
    wait_job(&h, &job, "cancelled");
}

#[test]
fn the_page_asks_for_the_web_token_once_and_writes_with_it() {
    let token = "dashboard-token-0123456789-abcdefghijk";
    let mut h = TestHome::without_resources();
    let url = listen(&mut h, &format!("token = \"{token}\""), "");
    h.start_daemon();
    let job = h.submit(&h.spec("needs-the-token"));
    let b = Browser::start(1280, 900);
    b.goto(&format!("{url}/"));
    wait_for("the token prompt", || b.find("#token-form:not([hidden])"));
    // Reads need no token here: the queue shows meanwhile.
    wait_for("the job", || page_jobs(&b).contains(&job).then_some(()));

    // A wrong token: the write is refused in the daemon's words, and the page asks again.
    b.type_into("#token-input", "not-the-token-not-the-token-not-it");
    b.click("#token-form button");
    wait_for("the prompt gone", || {
        b.find("#token-form:not([hidden])").is_none().then_some(())
    });
    let cancel = format!("{} [data-action=cancel]", row(&job));
    b.click(&cancel);
    b.click(&cancel);
    let refused = wait_notice(&b, "web token");
    assert!(refused.contains("permission"), "{refused}");
    wait_for("the prompt again", || b.find("#token-form:not([hidden])"));
    h.settle();
    assert_eq!(show(&h, &job)["state"]["state"], "queued");

    // The right one: kept in local storage, and the write is done.
    b.type_into("#token-input", token);
    b.click("#token-form button");
    assert_eq!(
        b.script(
            "return localStorage.getItem('homebased.web.token');",
            json!([])
        ),
        json!(token)
    );
    b.click(&cancel);
    b.click(&cancel);
    wait_job(&h, &job, "cancelled");

    // Once: a reload does not ask again.
    b.goto(&format!("{url}/"));
    wait_for("the page loaded", || {
        b.text("#live").contains("updated").then_some(())
    });
    assert!(
        b.find("#token-form:not([hidden])").is_none(),
        "the page asked again"
    );
}

#[test]
fn with_fleet_the_page_switches_machines_and_acts_on_the_one_it_shows() {
    let mut beta = TestHome::without_resources();
    let beta_url = listen(
        &mut beta,
        "",
        "[fleet]\nenabled = true\nmachine_name = \"beta\"",
    );
    let beta_id = beta.start_daemon()["machine"].as_str().unwrap().to_string();
    let mut alpha = TestHome::without_resources();
    let url = listen(
        &mut alpha,
        "",
        &format!(
            "[fleet]\nenabled = true\nmachine_name = \"alpha\"\n[[fleet.machines]]\naddress = \"{beta_url}\""
        ),
    );
    alpha.start_daemon();
    wait_until("beta up in alpha's directory", || {
        alpha.json(&["fleet", "machines"])["machines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "beta" && m["state"] == "up")
    });
    let here = alpha.submit(&alpha.spec("on-alpha"));
    let there = beta.submit(&beta.spec("on-beta"));

    let b = Browser::start(1280, 900);
    b.goto(&format!("{url}/"));
    wait_for("alpha's own queue", || {
        (page_jobs(&b) == [here.clone()]).then_some(())
    });
    assert!(b.text("#machine-name") == "alpha", "{}", b.text("#machine"));
    wait_for("the machine switch", || {
        b.find("#machine-switch:not([hidden])")
    });
    assert!(b.text("#machine-facts").contains("1 of 1 peers up"));

    b.click(&format!("#machine-select option[value=\"{beta_id}\"]"));
    wait_for("beta's queue", || {
        (page_jobs(&b) == [there.clone()]).then_some(())
    });
    wait_for("beta named in the header", || {
        (b.text("#machine-name") == "beta").then_some(())
    });
    // A write goes to the machine shown: cancel on beta, through alpha.
    let cancel = format!("{} [data-action=cancel]", row(&there));
    b.click(&cancel);
    b.click(&cancel);
    wait_job(&beta, &there, "cancelled");
    alpha.settle();
    assert_eq!(show(&alpha, &here)["state"]["state"], "queued");
}

/// A Fleet section for `listen`'s `more`: Fleet on with the tests' token, and `peers`.
fn fleet_with_token(name: &str, peers: &[&str]) -> String {
    let mut text =
        format!("[fleet]\nenabled = true\nmachine_name = \"{name}\"\ntoken = \"{FLEET_TOKEN}\"\n");
    for p in peers {
        text.push_str(&format!("[[fleet.machines]]\naddress = \"{p}\"\n"));
    }
    text
}

/// The Fleet token of these tests (at least 32 characters).
const FLEET_TOKEN: &str = "dashboard-fleet-token-0123456789abcdef";

#[test]
fn on_a_fleet_machine_with_only_its_token_the_page_shows_lanes_and_queue_and_asks_for_it_at_a_write(
) {
    let mut beta = TestHome::without_resources();
    let beta_url = listen(&mut beta, "", &fleet_with_token("beta", &[]));
    let beta_id = beta.start_daemon()["machine"].as_str().unwrap().to_string();
    let mut alpha = TestHome::new(Probe::Gpus(1));
    set_cards(&alpha, &[0]);
    let url = listen(&mut alpha, "", &fleet_with_token("alpha", &[&beta_url]));
    alpha.start_daemon();
    wait_until("beta up in alpha's directory", || {
        alpha.json(&["fleet", "machines"])["machines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "beta" && m["state"] == "up")
    });
    let running = alpha.submit(&alpha.spec("runs-on-alpha"));
    wait_phase(&alpha, &running, "executing");
    let waiting = alpha.submit(&alpha.spec("waits-on-alpha"));

    let b = Browser::start(1280, 900);
    b.goto(&format!("{url}/"));
    // The lane with its run, and the queue, without any token: reads are open here.
    wait_for("gpu0 running its job", || {
        b.text("article[data-name=gpu0]")
            .contains("runs-on-alpha")
            .then_some(())
    });
    wait_for("both jobs in the queue", || {
        let jobs = page_jobs(&b);
        (jobs.contains(&running) && jobs.contains(&waiting)).then_some(())
    });
    wait_for("the machine named", || {
        (b.text("#machine-name") == "alpha").then_some(())
    });
    wait_for("the page up to date", || {
        b.text("#live").contains("updated").then_some(())
    });
    // Nothing asked at load, and no switch: the directory is behind the Fleet token.
    assert!(
        b.find("#token-form:not([hidden])").is_none(),
        "the page asked for a token before any write"
    );
    assert!(
        b.find("#machine-switch:not([hidden])").is_none(),
        "a switch without the directory"
    );
    let facts = b.text("#machine-facts");
    assert!(facts.contains("[fleet] token"), "{facts}");
    b.screenshot(&screenshot_dir().join("dashboard-fleet-token.png"), 1280);

    // A write asks for the Fleet token, by its key, and is not done without it.
    let cancel = format!("{} [data-action=cancel]", row(&waiting));
    b.click(&cancel);
    b.click(&cancel);
    let refused = wait_notice(&b, "Fleet token");
    assert!(refused.contains("permission"), "{refused}");
    wait_for("the token prompt", || b.find("#token-form:not([hidden])"));
    let prompt = b.text("#token-form label");
    assert!(prompt.contains("[fleet] token"), "{prompt}");
    alpha.settle();
    assert_eq!(show(&alpha, &waiting)["state"]["state"], "queued");

    // With the token: the directory is readable, so the switch shows, and the write is done.
    b.type_into("#token-input", FLEET_TOKEN);
    b.click("#token-form button");
    wait_for("the machine switch", || {
        b.find(&format!(
            "#machine-switch:not([hidden]) option[value=\"{beta_id}\"]"
        ))
    });
    wait_for("the peers counted", || {
        b.text("#machine-facts")
            .contains("1 of 1 peers up")
            .then_some(())
    });
    b.click(&cancel);
    b.click(&cancel);
    wait_job(&alpha, &waiting, "cancelled");
    assert!(
        b.text("article[data-name=gpu0]").contains("runs-on-alpha"),
        "the lane still shown"
    );
}

#[test]
fn the_page_numbers_steps_as_the_cli_does() {
    let mut h = TestHome::new(Probe::Gpus(1));
    set_cards(&h, &[0]);
    let url = listen(&mut h, "", "");
    h.start_daemon();
    let steps = json!([
        {"type": "task", "command": ["/bin/sh", "-c", "exit 0"]},
        {"type": "task", "command": ["/bin/sh", "-c", "sleep 600"]},
    ]);
    let job = h.submit(
        &h.spec("two-steps")
            .set("workload", Value::Null)
            .set("steps", steps),
    );
    let mut lane = Value::Null;
    wait_until("the second step running", || {
        lane = common::jobs::resource(&h, "gpu0");
        lane["run"]["step"] == 1 && lane["run"]["phase"]["phase"] == "executing"
    });
    let run_number = lane["run"]["run_number"].as_u64().unwrap();

    let b = Browser::start(1280, 900);
    b.goto(&format!("{url}/"));
    // The card says what `job log` heads the run with: its run number and its step index.
    let card = wait_for("the run on gpu0", || {
        let card = b.text("article[data-name=gpu0]");
        card.contains("two-steps").then_some(card)
    });
    assert!(
        card.contains(&format!("run {run_number}, step 1")),
        "the step from 0, as HOMEBASED_STEP_INDEX: {card}"
    );

    // The detail: each run's step as `job show`'s STEP column, the job's as its header.
    b.click("article[data-name=gpu0] a");
    wait_for("both runs in the detail", || {
        (b.find_all("#detail tr[data-task]").len() == 2).then_some(())
    });
    let page_steps = b.script(
        "return [...document.querySelectorAll('#detail tr[data-task] td:nth-child(3)')].map(c => c.textContent);",
        json!([]),
    );
    let cli_steps: Vec<String> = common::jobs::runs(&show(&h, &job))
        .iter()
        .map(|r| r["step"].to_string())
        .collect();
    assert_eq!(cli_steps, ["0", "1"]);
    assert_eq!(page_steps, json!(cli_steps));
    let out = h.cli(&["resource", "job", "show", &job]);
    let human = out.stdout.clone();
    let header = human
        .split("  ")
        .find(|part| part.starts_with("step "))
        .unwrap_or_else(|| panic!("no 'step N (steps 0-M)' in {human}"))
        .to_string();
    assert_eq!(
        header, "step 1 (steps 0-1)",
        "counted from 0 as STEP: {human}"
    );
    let facts = b.text("#detail dl.facts");
    assert!(
        facts.contains(&header),
        "the page says {header:?} as job show does: {facts}"
    );
}

#[test]
fn a_pinned_job_shows_its_lanes_name_even_when_it_was_listed_before_the_lanes() {
    let mut h = TestHome::new(Probe::Gpus(1));
    set_cards(&h, &[0]);
    let url = listen(&mut h, "", "");
    h.start_daemon();
    // A run that may not be stopped holds gpu0; a job pinned there waits behind it.
    let holder = h.submit(&h.spec("holder").set("preempt", json!({"mode": "wait"})));
    wait_phase(&h, &holder, "executing");
    let pinned = h.submit(
        &h.spec("pinned-to-gpu0")
            .priority("high")
            .set("resource", json!("gpu0")),
    );
    let gpu0 = common::jobs::resource(&h, "gpu0");
    let gpu0_id = gpu0["id"].as_str().unwrap().to_string();
    assert_eq!(show(&h, &pinned)["target"], json!(gpu0_id));

    // The page's lane reads fail at first (a daemon slow to answer them, a proxy), so the
    // queue is listed before the page knows any lane's name.
    let b = Browser::start(1280, 900);
    b.cdp("Network.enable", json!({}));
    b.cdp(
        "Network.setBlockedURLs",
        json!({"urls": ["*/v1/resources*"]}),
    );
    b.goto(&format!("{url}/"));
    wait_for("the queue without the lanes", || {
        page_jobs(&b).contains(&pinned).then_some(())
    });
    b.cdp("Network.setBlockedURLs", json!({"urls": []}));
    let target = format!("{} td[data-label=target]", row(&pinned));
    wait_for("the pinned job's target named", || {
        (b.text(&target) == "gpu0").then_some(())
    });
    let waits = b.text(&format!("{} td.waiting", row(&pinned)));
    assert!(
        waits.contains("gpu0") && waits.contains("holder"),
        "{waits}"
    );
    // The page's short form of a UUID: its first 8 and last 4 digits.
    let short_id = format!("{}…{}", &gpu0_id[..8], &gpu0_id[gpu0_id.len() - 4..]);
    let queue = b.text("#queue");
    assert!(
        !queue.contains(&short_id),
        "no lane UUID in the queue: {queue}"
    );
    b.click(&format!("{} td.name a", row(&pinned)));
    let facts = wait_for("the pinned job's detail", || {
        let facts = b.text("#detail dl.facts");
        facts.contains("target").then_some(facts)
    });
    assert!(
        facts.contains("gpu0") && !facts.contains(&short_id),
        "{facts}"
    );
}

#[test]
fn a_job_waiting_for_another_says_after_which_and_its_detail_lists_both_ends() {
    let mut h = TestHome::new(Probe::Gpus(1));
    set_cards(&h, &[0]);
    let url = listen(&mut h, "", "");
    h.start_daemon();
    let first = h.submit(
        &h.spec("train-first")
            .set("preempt", json!({"mode": "wait"})),
    );
    wait_phase(&h, &first, "executing");
    let eval = h.submit(&h.spec("evaluate").set("after", json!([first])));

    let b = Browser::start(1280, 900);
    b.goto(&format!("{url}/"));
    let waits = wait_for("the dependent job in the queue", || {
        page_jobs(&b).contains(&eval).then_some(())?;
        let waits = b.text(&format!("{} td.waiting", row(&eval)));
        waits.contains("after").then_some(waits)
    });
    assert_eq!(
        waits, "after train-first (active)",
        "as resource jobs words it"
    );
    b.click(&format!("{} td.name a", row(&eval)));
    let facts = wait_for("the dependent job's detail", || {
        let facts = b.text("#detail dl.facts");
        facts.contains("after").then_some(facts)
    });
    assert!(facts.contains("train-first"), "{facts}");
}

#[test]
fn the_page_says_how_old_the_gpu_sample_is_and_an_old_one_is_no_evidence_of_none() {
    let mut h = TestHome::new(Probe::Gpus(1));
    set_cards(&h, &[0]);
    let url = listen(&mut h, "", "");
    h.start_daemon();
    let b = Browser::start(1280, 900);
    b.goto(&format!("{url}/"));
    let fresh = wait_for("a fresh sample of gpu0", || {
        let text = b.text("article[data-name=gpu0] .sample");
        text.contains("no processes outside the queue")
            .then_some(text)
    });
    assert!(
        fresh.contains("sampled ") && fresh.contains("s ago"),
        "{fresh}"
    );

    // The daemon answers a sample taken 37 minutes ago (its sampler idles while nobody
    // reads the lanes): the page's reads of the lanes are answered so from here on.
    b.script(
        r#"const real = window.fetch;
        window.fetch = async (url, init) => {
          if (!String(url).startsWith("/v1/resources")) return real(url, init);
          const headers = { ...init.headers };
          delete headers["If-None-Match"];
          const res = await real(url, { ...init, headers });
          const data = await res.json();
          const then = new Date(Date.parse(res.headers.get("Date")) - 37 * 60 * 1000);
          for (const r of data.resources) if (r.gpu) r.gpu.sampled_at = then.toISOString();
          return new Response(JSON.stringify(data), { status: res.status, headers: res.headers });
        };
        return 1;"#,
        json!([]),
    );
    let old = wait_for("the old sample said as unknown", || {
        let text = b.text("article[data-name=gpu0] .sample");
        text.contains("sampled 37m").then_some(text)
    });
    assert!(old.contains("processes outside the queue: ?"), "{old}");
    assert!(!old.contains("no processes"), "{old}");
}

#[test]
fn each_card_shows_a_memory_bar_and_its_utilization_and_an_unknown_card_no_bar() {
    let mut h = TestHome::new(Probe::Gpus(1));
    set_cards(&h, &[0, 1]);
    set_gpu_state(
        &h,
        0,
        &[
            ("memory.used", "20480"),
            ("memory.total", "81920"),
            ("utilization.gpu", "37"),
            ("temperature.gpu", "45"),
            ("power.draw", "118.5"),
        ],
    );
    set_gpu_state(&h, 1, &[("temperature.gpu", "30")]);
    let url = listen(&mut h, "", "");
    h.start_daemon();
    let b = Browser::start(1280, 900);
    b.goto(&format!("{url}/"));
    let line = wait_for("gpu0's card state", || {
        let text = b.text("article[data-name=gpu0] .card-line");
        text.contains("GiB").then_some(text)
    });
    assert_eq!(line, "20.0 / 80.0 GiB · 37% util · 45 °C · 119 W");
    let bar = b.script(
        r#"const bar = document.querySelector("article[data-name=gpu0] .membar");
        return [bar.getAttribute("aria-valuenow"), bar.getAttribute("aria-valuemax"),
                bar.querySelector(".fill").style.width];"#,
        json!([]),
    );
    assert_eq!(bar, json!(["20480", "81920", "25%"]));
    let unknown = b.text("article[data-name=gpu1] .card-line");
    assert_eq!(unknown, "? / ? GiB · util ? · 30 °C");
    let class = b.script(
        r#"return document.querySelector("article[data-name=gpu1] .membar").className;"#,
        json!([]),
    );
    assert_eq!(class, "membar unknown");
}

/// A run on two of four lanes: the page shows it on both of its cards (one task), not on the
/// others, and names both lanes in the job's state and the count in its target, in the
/// words `job show` and `resource jobs` use.
#[test]
fn a_two_gpu_run_shows_on_both_of_its_lanes_and_its_state_names_both() {
    let mut h = TestHome::new(Probe::Gpus(4));
    set_cards(&h, &[0, 1, 2, 3]);
    let url = listen(&mut h, "", "");
    h.start_daemon();
    // gpu0 is busy, so the pair runs on gpu1 and gpu2, not on the first two lanes.
    let first = h.submit(&h.spec("one-lane").set("preempt", json!({"mode": "wait"})));
    wait_phase(&h, &first, "executing");
    let pair = h.submit(&h.spec("the-pair").set("gpus", json!(2)));
    let running = wait_phase(&h, &pair, "executing");
    let task = running["run"]["task"].as_str().unwrap().to_string();
    let held: Vec<String> = h
        .resources()
        .into_iter()
        .filter(|r| r["run"]["job"] == pair.as_str())
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(held, ["gpu1", "gpu2"]);

    let b = Browser::start(1280, 900);
    b.goto(&format!("{url}/"));
    // The page's short form of a UUID: its first 8 and last 4 digits.
    let short_task = format!("{}…{}", &task[..8], &task[task.len() - 4..]);
    for lane in ["gpu1", "gpu2"] {
        let card = wait_for(&format!("the pair on {lane}"), || {
            let card = b.text(&format!("article[data-name={lane}]"));
            card.contains("the-pair").then_some(card)
        });
        assert!(card.contains(&short_task), "one run, one task: {card}");
        assert!(card.contains("executing"), "{card}");
    }
    for lane in ["gpu0", "gpu3"] {
        let card = b.text(&format!("article[data-name={lane}]"));
        assert!(!card.contains("the-pair"), "{lane}: {card}");
    }

    // The job's state in `job show`'s words, its target in `resource jobs`' ones.
    let show_out = h.cli(&["resource", "job", "show", &pair]).stdout;
    let cli_state = show_out
        .split("state ")
        .nth(1)
        .and_then(|rest| rest.split("  ").next())
        .unwrap_or_else(|| panic!("no state in job show: {show_out}"))
        .to_string();
    assert_eq!(cli_state, "active on gpu1,gpu2", "{show_out}");
    let state = wait_for("the pair's state on the page", || {
        let state = b.text(&format!("{} td.state", row(&pair)));
        state.starts_with("active").then_some(state)
    });
    assert_eq!(state, cli_state);
    let jobs_out = h.cli(&["resource", "jobs"]).stdout;
    let cli_row = jobs_out
        .lines()
        .find(|l| l.contains("the-pair"))
        .unwrap_or_else(|| panic!("the pair in resource jobs: {jobs_out}"));
    let target = b.text(&format!("{} td[data-label=target]", row(&pair)));
    assert_eq!(target, "2 x any");
    assert!(
        cli_row.contains(&format!("{target} / the-pair")),
        "{cli_row}"
    );
    b.click(&format!("{} td.name a", row(&pair)));
    let facts = wait_for("the pair's detail", || {
        let facts = b.text("#detail dl.facts");
        facts.contains("target").then_some(facts)
    });
    assert!(facts.contains(&cli_state), "{facts}");
    // The run's row names both of its lanes too, as `job show`'s runs carry them.
    let run_lanes: Vec<String> = common::jobs::runs(&show(&h, &pair))[0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| {
            let id = id.as_str().unwrap();
            h.resources()
                .into_iter()
                .find(|r| r["id"] == id)
                .map(|r| r["name"].as_str().unwrap().to_string())
                .unwrap()
        })
        .collect();
    assert_eq!(run_lanes, ["gpu1", "gpu2"]);
    let cell = format!("#detail tr[data-task=\"{task}\"] td:nth-child(4)");
    let page_lanes = wait_for("the run's lanes in the detail", || {
        let text = b.text(&cell);
        (!text.is_empty()).then_some(text)
    });
    assert_eq!(page_lanes, run_lanes.join(","));
    b.screenshot(&screenshot_dir().join("dashboard-two-gpu-run.png"), 1280);
}
