//! The daemon as a user service (SPEC section 14), against a fake `systemctl` and `loginctl`
//! on `PATH`: scripts written into the test's bin directory that record every call, and whose
//! `start` runs the unit's own `ExecStart` in the background (so the unit really starts the
//! daemon). Also the shell completions and the man page generated from the clap definitions.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::jobs::*;
use crate::common::{homebased_bin, Probe, TestHome};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

const FAKE_SYSTEMCTL: &str = r#"#!/bin/sh
# A fake `systemctl --user` for one unit: records its calls; start runs the unit's ExecStart.
state="$FAKE_SYSTEMD_DIR"
echo "systemctl $*" >> "$state/calls"
[ "$1" = "--user" ] || { echo "fake systemctl knows only --user" >&2; exit 1; }
shift
unit="$XDG_CONFIG_HOME/systemd/user/homebased.service"
alive() { [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null; }
start() {
  alive && return 0
  line=$(sed -n 's/^ExecStart=//p' "$unit")
  eval "set -- $line"
  setsid "$@" </dev/null >>"$state/service.log" 2>&1 &
  echo $! > "$state/pid"
}
stop() {
  alive || { rm -f "$state/pid"; return 0; }
  pid=$(cat "$state/pid")
  kill -TERM "$pid"
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
  rm -f "$state/pid"
}
case "$1" in
  daemon-reload) ;;
  enable) start ;;
  disable) stop ;;
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  is-active) if alive; then echo active; else echo inactive; exit 3; fi ;;
  *) echo "fake systemctl: unknown verb $1" >&2; exit 1 ;;
esac
"#;

const FAKE_LOGINCTL: &str = r#"#!/bin/sh
echo "loginctl $*" >> "$FAKE_SYSTEMD_DIR/calls"
echo "Linger=no"
"#;

/// A home with the fake service manager on `PATH`. On drop, whatever daemon the fake
/// started is stopped, so a failed test leaves nothing behind.
struct ServiceHome {
    h: TestHome,
    path_env: String,
}

impl ServiceHome {
    fn new() -> ServiceHome {
        let mut h = TestHome::new(Probe::Gpus(1));
        let bin = h.tmp().join("bin");
        for (name, script) in [("systemctl", FAKE_SYSTEMCTL), ("loginctl", FAKE_LOGINCTL)] {
            let path = bin.join(name);
            std::fs::write(&path, script).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let state = h.tmp().join("systemd");
        std::fs::create_dir_all(&state).unwrap();
        let path_env = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        h.set_env("PATH", &path_env);
        h.set_env("FAKE_SYSTEMD_DIR", &state);
        ServiceHome { h, path_env }
    }

    fn unit_path(&self) -> PathBuf {
        self.h
            .tmp()
            .join("user/.config/systemd/user/homebased.service")
    }

    /// The recorded calls that act, in order (`is-active`, a query, left out).
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.h.tmp().join("systemd/calls"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.contains(" is-active "))
            .map(String::from)
            .collect()
    }
}

impl Drop for ServiceHome {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(self.h.tmp().join("systemd/pid")).unwrap_or_default();
        if let Ok(pid) = pid.trim().parse::<i32>() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

fn user_name() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .name
}

fn unit_line<'a>(unit: &'a str, key: &str) -> &'a str {
    unit.lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key} in {unit}"))
}

#[test]
fn install_dry_run_prints_the_unit_and_commands_and_changes_nothing() {
    let s = ServiceHome::new();
    let dry = s.h.json(&[
        "daemon",
        "install",
        "--dry-run",
        "--web-listen",
        "127.0.0.1:7677",
    ]);
    assert_eq!(dry["unit_path"], json!(s.unit_path()), "{dry}");
    assert_eq!(
        dry["commands"],
        json!([
            ["systemctl", "--user", "daemon-reload"],
            [
                "systemctl",
                "--user",
                "enable",
                "--now",
                "homebased.service"
            ]
        ])
    );
    let unit = dry["unit"].as_str().unwrap();
    assert_eq!(
        unit_line(unit, "ExecStart="),
        format!(
            "ExecStart={} --home {} daemon serve --web-listen 127.0.0.1:7677",
            homebased_bin().display(),
            s.h.home().display()
        )
    );
    assert!(!s.unit_path().exists(), "a dry run writes no unit");
    assert_eq!(s.calls(), Vec::<String>::new(), "a dry run runs nothing");
    assert!(!s.h.socket_answers(), "a dry run starts no daemon");
}

#[test]
fn installed_service_starts_stops_and_restarts_through_systemctl() {
    let s = ServiceHome::new();
    let installed = s.h.json(&["daemon", "install"]);
    assert_eq!(installed["socket"], "up", "{installed}");
    assert_eq!(installed["service"]["state"], "active", "{installed}");
    let user = user_name();
    assert_eq!(
        s.calls(),
        vec![
            "systemctl --user daemon-reload".to_string(),
            "systemctl --user enable --now homebased.service".into(),
            format!("loginctl show-user {user} -p Linger"),
        ]
    );
    let warnings = installed["warnings"].to_string();
    assert!(warnings.contains("lingering is off"), "{installed}");

    let unit = std::fs::read_to_string(s.unit_path()).unwrap();
    assert_eq!(installed["unit"], json!(unit));
    assert_eq!(
        unit_line(&unit, "ExecStart="),
        format!(
            "ExecStart={} --home {} daemon serve",
            homebased_bin().display(),
            s.h.home().display()
        )
    );
    assert_eq!(unit_line(&unit, "KillMode="), "KillMode=process");
    assert_eq!(unit_line(&unit, "Restart="), "Restart=on-failure");
    assert_eq!(
        unit_line(&unit, "Environment="),
        format!("Environment=PATH={}", s.path_env)
    );
    assert_eq!(unit_line(&unit, "WantedBy="), "WantedBy=default.target");

    let status = s.h.json(&["daemon", "status"]);
    assert_eq!(status["service"]["unit"], "homebased.service", "{status}");
    assert_eq!(status["service"]["state"], "active", "{status}");
    let human = s.h.cli(&["daemon", "status"]);
    assert!(
        human
            .stdout
            .contains("service systemd homebased.service: active"),
        "{human:?}"
    );

    // A run survives a restart of the service.
    let gate = s.h.tmp().join("gate");
    let job = s.h.submit(&gated_spec(&s.h, "long", "", &gate, ""));
    let active = wait_phase(&s.h, &job, "executing");
    let task = active["run"]["task"].clone();
    let before = status["pid"].clone();
    let restart = s.h.cli(&["daemon", "restart"]);
    assert_eq!(restart.code(), 0, "{restart:?}");
    assert!(
        restart
            .stdout
            .contains("daemon restarted through systemd unit homebased.service"),
        "{restart:?}"
    );
    assert_eq!(
        s.calls().last().unwrap(),
        "systemctl --user restart homebased.service"
    );
    let after = s.h.json(&["daemon", "status"]);
    assert_ne!(after["pid"], before, "a new daemon answers: {after}");
    let still = wait_phase(&s.h, &job, "executing");
    assert_eq!(still["run"]["task"], task, "the same run goes on");

    // Stop refuses with work in flight, like a stop by hand, and asks systemctl nothing.
    let calls_before = s.calls().len();
    let refused = s.h.json_err(&["daemon", "stop"], 5);
    assert_eq!(refused["code"], "jobs_in_flight", "{refused}");
    assert_eq!(s.calls().len(), calls_before);
    open_gate(&gate);
    wait_job(&s.h, &job, "succeeded");

    let stopped = s.h.json(&["daemon", "stop"]);
    assert_eq!(stopped["socket"], "down", "{stopped}");
    assert_eq!(stopped["service"]["state"], "inactive", "{stopped}");
    assert_eq!(
        s.calls()[calls_before..].first().unwrap(),
        "systemctl --user stop homebased.service"
    );
    let started = s.h.json(&["daemon", "start"]);
    assert_eq!(started["socket"], "up", "{started}");
    assert!(s
        .calls()
        .contains(&"systemctl --user start homebased.service".to_string()));
    let done = s.h.json(&["daemon", "uninstall"]);
    assert_eq!(done["socket"], "down", "{done}");
}

#[test]
fn uninstall_refuses_with_work_in_flight_and_cancels_it_with_yes() {
    let s = ServiceHome::new();
    s.h.json(&["daemon", "install"]);
    let gate = s.h.tmp().join("gate");
    let job = s.h.submit(&gated_spec(&s.h, "long", "", &gate, ""));
    wait_phase(&s.h, &job, "executing");

    let refused = s.h.json_err(&["daemon", "uninstall"], 5);
    assert_eq!(refused["code"], "jobs_in_flight", "{refused}");
    assert!(s.unit_path().exists(), "a refused uninstall keeps the unit");
    assert!(s.h.socket_answers());

    let calls_before = s.calls().len();
    let done = s.h.json(&["daemon", "uninstall", "--yes"]);
    assert_eq!(done["socket"], "down", "{done}");
    assert!(!s.unit_path().exists(), "the unit is removed");
    assert_eq!(
        s.calls()[calls_before..].to_vec(),
        vec![
            "systemctl --user disable --now homebased.service".to_string(),
            "systemctl --user daemon-reload".into(),
        ]
    );
    let status = s.h.json(&["daemon", "status"]);
    assert_eq!(status["in_flight"], 0, "{status}");
    assert!(
        status.get("service").is_none(),
        "no unit any more: {status}"
    );
}

#[test]
fn install_never_overwrites_the_unit_of_another_home() {
    let s = ServiceHome::new();
    let other = "# homebased home: /somewhere/else\n[Service]\nExecStart=/bin/true\n";
    std::fs::create_dir_all(s.unit_path().parent().unwrap()).unwrap();
    std::fs::write(s.unit_path(), other).unwrap();
    for args in [
        &["daemon", "install"][..],
        &["daemon", "install", "--dry-run"],
    ] {
        let err = s.h.json_err(args, 5);
        assert_eq!(err["code"], "resource_conflict", "{err}");
        assert_eq!(err["input"]["installed_home"], "/somewhere/else", "{err}");
    }
    let err = s.h.json_err(&["daemon", "uninstall"], 5);
    assert_eq!(err["code"], "resource_conflict", "{err}");
    assert_eq!(std::fs::read_to_string(s.unit_path()).unwrap(), other);
    assert_eq!(s.calls(), Vec::<String>::new());
    // Not this home's unit: start and stop act by hand.
    let mut h = s;
    let started = h.h.start_daemon();
    assert!(started.get("service").is_none(), "{started}");
    h.h.stop_daemon();
    assert_eq!(h.calls(), Vec::<String>::new());
}

/// `systemd-analyze verify` accepts the generated unit (paths with spaces, a config, a web
/// listener). CI installs it (`.ci/run`); elsewhere a machine without it skips, saying so.
#[test]
fn generated_unit_passes_systemd_analyze_verify() {
    let Ok(analyze) = which("systemd-analyze") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have systemd-analyze (.ci/run installs systemd)"
        );
        eprintln!("systemd-analyze is not installed: skipped");
        return;
    };
    let mut s = ServiceHome::new();
    let config = s.h.write_file("my config.toml", "");
    let spaced = s.h.tmp().join("state home");
    let mut cmd = s.h.command();
    cmd.arg("--home")
        .arg(&spaced)
        .arg("--config")
        .arg(&config)
        .args([
            "--json",
            "daemon",
            "install",
            "--dry-run",
            "--web-listen",
            "127.0.0.1:7677",
        ]);
    let out = common::run_bounded(cmd, None);
    assert_eq!(out.code(), 0, "{out:?}");
    let dry = common::parse_one(&out.stdout);
    let unit = dry["unit"].as_str().unwrap();
    assert!(
        unit_line(unit, "ExecStart=").contains(&format!("--config \"{}\"", config.display())),
        "{unit}"
    );
    let dir = s.h.tmp().join("verify");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("homebased.service");
    std::fs::write(&file, unit).unwrap();
    s.h.unset_env("FAKE_SYSTEMD_DIR");
    let verify = std::process::Command::new(analyze)
        .arg("verify")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "systemd-analyze verify refused:\n{unit}\n{}",
        String::from_utf8_lossy(&verify.stderr)
    );
}

fn which(program: &str) -> Result<PathBuf, ()> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .ok_or(())
}

#[test]
fn completions_and_man_page_are_generated_from_the_commands() {
    let h = TestHome::new(Probe::Gpus(1));
    for shell in ["bash", "zsh", "fish"] {
        let out = h.cli(&["completions", shell]);
        assert_eq!(out.code(), 0, "{out:?}");
        for word in ["daemon", "install", "resource", "submit"] {
            assert!(
                out.stdout.contains(word),
                "{word} in the {shell} completion"
            );
        }
    }
    let man = h.cli(&["man"]);
    assert_eq!(man.code(), 0, "{man:?}");
    assert!(man.stdout.contains(".TH homebased 1"), "{}", man.stdout);
    assert!(man.stdout.contains("HOMEBASED DAEMON UNINSTALL"));
    assert!(!h.home().exists(), "neither needs a home");
}
