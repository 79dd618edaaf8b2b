//! The foundation as a user sees it: the daemon's lifecycle on one state home, the socket
//! API behind the CLI, exit codes and JSON envelopes, home resolution, configuration, and
//! bad input (a second daemon, a bad config, a newer database) that changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::common::{error_of, new_uuid, Probe, TestHome};
use serde_json::Value;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};

#[test]
fn second_daemon_is_refused_and_changes_nothing() {
    let mut h = TestHome::new(Probe::Gpus(2));
    let first = h.start_daemon();
    h.json(&["resource", "register", "--name", "auxiliary"]);
    let resources = h.resources();
    let lock = std::fs::read(h.home().join("daemon.lock")).unwrap();
    let bytes = h.database_bytes();

    // Another probe result must not be applied by the refused daemon either.
    h.set_probe(Probe::Gpus(4));
    let serve = h.json_err(&["daemon", "serve"], 5);
    assert_eq!(serve["code"], "daemon_already_running", "{serve}");
    let start = h.json_err(&["daemon", "start"], 5);
    assert_eq!(start["code"], "daemon_already_running", "{start}");

    assert!(
        h.database_bytes() == bytes,
        "the refused daemon must not touch the database"
    );
    assert_eq!(
        std::fs::read(h.home().join("daemon.lock")).unwrap(),
        lock,
        "daemon.lock still names the first daemon"
    );
    let status = h.json(&["daemon", "status"]);
    assert_eq!(status["socket"], "up");
    assert_eq!(status["pid"], first["pid"], "the first daemon still serves");
    assert_eq!(h.resources(), resources);
}

#[test]
fn daemon_status_reads_the_database_while_the_daemon_is_down() {
    let mut h = TestHome::without_resources();
    h.spawn_serve();
    let up = h.json(&["daemon", "status"]);
    assert_eq!(up["socket"], "up");
    assert!(up["pid"].as_u64().is_some(), "{up}");
    h.submit(&h.spec("one"));
    h.submit(&h.spec("two"));
    let exit = h.kill_serve(nix::sys::signal::Signal::SIGTERM);
    assert!(
        exit.success(),
        "SIGTERM shuts the daemon down cleanly: {exit}"
    );

    let down = h.json(&["daemon", "status"]);
    assert_eq!(down["socket"], "down", "{down}");
    assert_eq!(down["pid"], Value::Null, "{down}");
    assert_eq!(down["in_flight"], 2, "read from the database: {down}");
    assert_eq!(down["home"], h.home().to_str().unwrap(), "{down}");
    assert_eq!(down["version"], up["version"], "{down}");
    assert!(down.get("web").is_some(), "{down}");
}

#[test]
fn daemon_status_of_a_home_that_never_ran_is_down_with_nothing_in_flight() {
    let h = TestHome::without_resources();
    let status = h.json(&["daemon", "status"]);
    assert_eq!(status["socket"], "down", "{status}");
    assert_eq!(status["in_flight"], 0, "{status}");
    assert_eq!(status["pid"], Value::Null, "{status}");
}

#[test]
fn commands_without_a_daemon_fail_with_retryable_daemon_unavailable() {
    let h = TestHome::without_resources();
    let job = new_uuid();
    let spec = h.spec_file(&h.spec("nobody listens"));
    for args in [
        vec!["resource", "list"],
        vec!["resource", "jobs"],
        vec!["resource", "register", "--name", "auxiliary"],
        vec!["resource", "job", "show", &job],
        vec!["resource", "job", "cancel", &job],
        vec!["resource", "job", "move", &job, "--front"],
        vec![
            "resource",
            "job",
            "submit",
            "--spec",
            spec.to_str().unwrap(),
        ],
    ] {
        let err = h.json_err(&args, 1);
        assert_eq!(err["code"], "daemon_unavailable", "{args:?}: {err}");
        assert_eq!(err["retryable"], true, "{args:?}: {err}");
    }
    let human = h.cli(&["resource", "list"]);
    assert_eq!(human.code(), 1);
    assert!(
        human.stderr.contains("daemon_unavailable"),
        "human errors name the code: {}",
        human.stderr
    );
}

#[test]
fn json_and_quiet_together_are_a_usage_error() {
    let h = TestHome::without_resources();
    for args in [
        ["--json", "--quiet", "version"],
        ["--quiet", "--json", "version"],
    ] {
        let out = h.cli(&args);
        let err = error_of(&out, 2, &args.join(" "));
        assert_eq!(err["code"], "usage", "{err}");
    }
    let human = h.cli(&["--quiet", "--json", "resource", "list"]);
    assert_eq!(human.code(), 2, "{human:?}");
}

#[test]
fn socket_is_private_to_the_user_and_home_is_0700() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    let home = std::fs::metadata(h.home()).unwrap();
    assert!(home.is_dir());
    assert_eq!(home.permissions().mode() & 0o777, 0o700, "home mode");
    let socket = std::fs::metadata(h.socket()).unwrap();
    assert!(socket.file_type().is_socket(), "homebased.sock is a socket");
    assert_eq!(socket.permissions().mode() & 0o777, 0o600, "socket mode");
}

#[test]
fn daemon_stop_refuses_while_jobs_are_queued_and_stop_yes_cancels_them() {
    let mut h = TestHome::without_resources();
    h.start_daemon();
    let job = h.submit(&h.spec("waits"));

    let err = h.json_err(&["daemon", "stop"], 5);
    assert_eq!(err["code"], "jobs_in_flight", "{err}");
    let status = h.json(&["daemon", "status"]);
    assert_eq!(
        status["socket"], "up",
        "a refused stop leaves the daemon up"
    );
    assert_eq!(status["in_flight"], 1);
    let show = h.json(&["resource", "job", "show", &job]);
    assert_eq!(show["state"]["state"], "queued", "{show}");

    let stopped = h.json(&["daemon", "stop", "--yes"]);
    assert_eq!(stopped["socket"], "down", "{stopped}");
    assert_eq!(stopped["in_flight"], 0, "{stopped}");
    let status = h.json(&["daemon", "status"]);
    assert_eq!(status["socket"], "down");
    assert_eq!(status["in_flight"], 0);

    h.start_daemon();
    let show = h.json(&["resource", "job", "show", &job]);
    assert_eq!(
        show["state"]["state"], "cancelled",
        "stop --yes cancelled it: {show}"
    );
    assert!(h.queue().is_empty());
}

#[test]
fn daemon_restart_keeps_queued_jobs_and_resources() {
    let mut h = TestHome::without_resources();
    let first = h.start_daemon();
    h.submit(&h.spec("a").priority("low"));
    h.submit(&h.spec("b").priority("high"));
    let resources = h.resources();
    let queue = h.queue();
    let restarted = h.json(&["daemon", "restart"]);
    assert_eq!(restarted["socket"], "up", "{restarted}");
    assert_ne!(restarted["pid"], first["pid"], "a new daemon process");
    assert_eq!(
        restarted["machine"], first["machine"],
        "the machine UUID is kept"
    );
    assert_eq!(h.resources(), resources);
    assert_eq!(h.queue(), queue);
}

fn refused_config(h: &TestHome, config: &str) {
    let err = h.json_err(&["--config", config, "config", "validate"], 2);
    assert_eq!(
        err["code"], "config_invalid",
        "config validate {config}: {err}"
    );
    let err = h.json_err(&["--config", config, "daemon", "serve"], 2);
    assert_eq!(
        err["code"], "config_invalid",
        "daemon serve {config}: {err}"
    );
}

#[test]
fn invalid_config_is_refused_by_config_validate_and_daemon_serve() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    h.stop_daemon();
    let bytes = h.database_bytes();

    let cases = [
        ("not-toml.toml", "this is = = not toml\n"),
        (
            "unknown-key.toml",
            "[resource.notify_blocked_after]\nyeild = \"15m\"\n",
        ),
        ("unknown-table.toml", "[scheduler]\nfast = true\n"),
        (
            "zero.toml",
            "[resource.notify_blocked_after]\nwait = \"0s\"\n",
        ),
        (
            "not-a-duration.toml",
            "[resource.cleanup]\nbound = \"soon\"\n",
        ),
        ("bad-address.toml", "[web]\nlisten = \"not an address\"\n"),
    ];
    for (name, text) in cases {
        let path = h.write_file(name, text);
        refused_config(&h, path.to_str().unwrap());
    }
    let missing = h.tmp().join("no-such-config.toml");
    refused_config(&h, missing.to_str().unwrap());

    assert!(
        h.database_bytes() == bytes,
        "a refused config leaves the database unchanged"
    );
    let status = h.json(&["daemon", "status"]);
    assert_eq!(
        status["socket"], "down",
        "no daemon came up with a bad config"
    );
}

#[test]
fn config_named_by_homebased_config_must_exist() {
    let mut h = TestHome::without_resources();
    let missing = h.tmp().join("absent.toml");
    h.set_env("HOMEBASED_CONFIG", &missing);
    let err = h.json_err(&["config", "validate"], 2);
    assert_eq!(err["code"], "config_invalid", "{err}");
    let err = h.json_err(&["daemon", "serve"], 2);
    assert_eq!(err["code"], "config_invalid", "{err}");
}

#[test]
fn daemon_start_with_an_invalid_config_is_config_invalid() {
    let h = TestHome::without_resources();
    let path = h.write_file(
        "zero.toml",
        "[resource.notify_blocked_after]\nwait = \"0s\"\n",
    );
    let err = h.json_err(&["--config", path.to_str().unwrap(), "daemon", "start"], 2);
    assert_eq!(err["code"], "config_invalid", "{err}");
}

#[test]
fn config_validate_shows_path_existence_and_effective_settings() {
    let mut h = TestHome::without_resources();
    let default = h.json(&["config", "validate"]);
    let default_path = h.tmp().join("user/.config/homebased/config.toml");
    assert_eq!(default["path"], default_path.to_str().unwrap(), "{default}");
    assert_eq!(default["exists"], false, "{default}");
    let blocked = &default["settings"]["resource"]["notify_blocked_after"];
    assert_eq!(blocked["yield"], "15m", "{default}");
    assert_eq!(blocked["wait"], "30m", "{default}");

    let path = h.write_file(
        "custom.toml",
        "[resource.notify_blocked_after]\nyield = \"5m\"\n\n[resource.cleanup]\nbound = \"90s\"\n",
    );
    let custom = h.json(&["--config", path.to_str().unwrap(), "config", "validate"]);
    assert_eq!(custom["path"], path.to_str().unwrap(), "{custom}");
    assert_eq!(custom["exists"], true, "{custom}");
    let blocked = &custom["settings"]["resource"]["notify_blocked_after"];
    assert_eq!(blocked["yield"], "5m", "{custom}");
    assert_eq!(blocked["wait"], "30m", "defaults fill the rest: {custom}");
    assert_eq!(
        custom["settings"]["resource"]["cleanup"]["bound"], "1m 30s",
        "{custom}"
    );

    h.set_env("HOMEBASED_CONFIG", &path);
    let from_env = h.json(&["config", "validate"]);
    assert_eq!(from_env["path"], path.to_str().unwrap(), "{from_env}");
    assert_eq!(from_env["settings"], custom["settings"]);
}

#[test]
fn version_reports_api_and_fleet_protocol_versions() {
    let h = TestHome::without_resources();
    let v = h.json(&["version"]);
    assert_eq!(v["api_version"], 1);
    let version = v["version"].as_str().expect("a version string");
    assert_eq!(version.split('.').count(), 3, "semver: {v}");
    assert!(v["fleet_protocol_version"].as_u64().is_some(), "{v}");
    assert!(v.get("git_revision").is_some(), "{v}");
}

#[test]
fn machine_flag_accepts_the_local_machine_and_refuses_others() {
    let mut h = TestHome::new(Probe::Gpus(1));
    let status = h.start_daemon();
    let machine = status["machine"]
        .as_str()
        .expect("status names the machine")
        .to_string();
    let list = h.json(&["resource", "list", "--machine", &machine]);
    assert_eq!(list["machine"], machine.as_str());
    assert_eq!(list["resources"].as_array().unwrap().len(), 1);
    let jobs = h.json(&["resource", "jobs", "--machine", &machine]);
    assert_eq!(jobs["machine"], machine.as_str());

    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let host = homebased_shared::peer_address::machine_name_from_host(&host);
    let by_name = h.json(&["resource", "list", "--machine", &host]);
    assert_eq!(
        by_name["machine"],
        machine.as_str(),
        "the host name is the default machine name"
    );

    let other = new_uuid();
    for m in ["other", other.as_str()] {
        for args in [
            ["resource", "list", "--machine", m],
            ["resource", "jobs", "--machine", m],
        ] {
            let err = h.json_err(&args, 3);
            assert_eq!(err["code"], "machine_not_found", "{args:?}: {err}");
        }
    }
}

#[test]
fn home_is_the_flag_then_homebased_home_then_xdg_state_then_local_state() {
    let mut h = TestHome::without_resources();
    let user = h.tmp().join("user");
    let home_of = |h: &TestHome, flag: Option<&str>| {
        let mut cmd = h.command();
        if let Some(f) = flag {
            cmd.args(["--home", f]);
        }
        cmd.args(["--json", "daemon", "status"]);
        let out = common::run_bounded(cmd, None);
        assert_eq!(out.code(), 0, "{out:?}");
        common::parse_one(&out.stdout)["home"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let state = user.join("state/homebased");
    assert_eq!(
        home_of(&h, None),
        state.to_str().unwrap(),
        "$XDG_STATE_HOME/homebased"
    );
    let env_home = h.tmp().join("env-home");
    h.set_env("HOMEBASED_HOME", &env_home);
    assert_eq!(
        home_of(&h, None),
        env_home.to_str().unwrap(),
        "HOMEBASED_HOME"
    );
    let flag = h.tmp().join("flag-home");
    assert_eq!(
        home_of(&h, Some(flag.to_str().unwrap())),
        flag.to_str().unwrap(),
        "--home wins"
    );
    h.unset_env("HOMEBASED_HOME");
    let mut cmd = h.command();
    cmd.env_remove("XDG_STATE_HOME")
        .args(["--json", "daemon", "status"]);
    let out = common::run_bounded(cmd, None);
    assert_eq!(out.code(), 0, "{out:?}");
    let local = user.join(".local/state/homebased");
    assert_eq!(
        common::parse_one(&out.stdout)["home"],
        local.to_str().unwrap()
    );
    assert!(
        !state.exists() && !env_home.exists() && !flag.exists(),
        "status creates no home"
    );
}

#[test]
fn serve_shuts_down_cleanly_on_sigterm_and_sigint() {
    let mut h = TestHome::without_resources();
    for signal in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
    ] {
        h.spawn_serve();
        let exit = h.kill_serve(signal);
        assert!(exit.success(), "{signal}: {exit}");
        assert!(!h.socket().exists(), "{signal}: the socket is removed");
        let status = h.json(&["daemon", "status"]);
        assert_eq!(status["socket"], "down", "{signal}: {status}");
        let err = h.json_err(&["resource", "list"], 1);
        assert_eq!(err["code"], "daemon_unavailable");
    }
}

#[test]
fn a_database_from_a_newer_version_is_refused_and_left_untouched() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    h.stop_daemon();
    {
        let db = rusqlite::Connection::open(h.database()).unwrap();
        let current: i64 = db
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        db.execute_batch(&format!("PRAGMA user_version = {}", current + 100))
            .unwrap();
    }
    let bytes = h.database_bytes();
    let out = h.cli(&["--json", "daemon", "serve"]);
    assert_ne!(out.code(), 0, "a newer database is refused: {out:?}");
    let err: Value = serde_json::from_str(out.stderr.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the refusal is the JSON envelope ({e}): {out:?}"));
    let message = err["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("version") || message.contains("newer"),
        "the message says why: {err}"
    );
    assert!(
        h.database_bytes() == bytes,
        "the newer database is never modified"
    );
    let err = h.json_err(&["resource", "list"], 1);
    assert_eq!(
        err["code"], "daemon_unavailable",
        "no daemon came up: {err}"
    );
}
