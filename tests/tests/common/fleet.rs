//! One machine of a test fleet (SPEC section 13): a real daemon on its own home with a TCP
//! listener on its own loopback port, configured with Fleet on. Shared by the Fleet tests.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::http;
use crate::common::{wait_until, Probe, TestHome};
use serde_json::Value;
use std::time::Duration;

/// The Fleet token of the tests (at least 32 characters).
pub const TOKEN: &str = "fleet-test-token-0123456789abcdef";

pub struct Machine {
    pub h: TestHome,
    pub port: u16,
    pub name: String,
}

impl Machine {
    /// A machine without resources: its jobs stay queued.
    pub fn new(name: &str) -> Machine {
        Machine::on(name, TestHome::without_resources())
    }

    /// A machine with one (fake) GPU, so that its jobs run.
    pub fn with_gpu(name: &str) -> Machine {
        Machine::on(name, TestHome::new(Probe::Gpus(1)))
    }

    fn on(name: &str, h: TestHome) -> Machine {
        Machine {
            h,
            port: http::free_port(),
            name: name.to_string(),
        }
    }

    pub fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Writes the config (with `peers` as `[[fleet.machines]]`).
    pub fn configure(&mut self, token: Option<&str>, peers: &[String]) {
        let mut text = format!(
            "[web]\nlisten = \"127.0.0.1:{}\"\n[fleet]\nenabled = true\nmachine_name = \"{}\"\n",
            self.port, self.name
        );
        if let Some(t) = token {
            text.push_str(&format!("token = \"{t}\"\n"));
        }
        for p in peers {
            text.push_str(&format!("[[fleet.machines]]\naddress = \"{p}\"\n"));
        }
        self.h.use_config(&text);
    }

    /// Configures and starts the daemon; answers its machine UUID.
    pub fn start(&mut self, token: Option<&str>, peers: &[String]) -> String {
        self.configure(token, peers);
        let status = self.h.start_daemon();
        status["machine"].as_str().unwrap().to_string()
    }

    pub fn machines(&self) -> Vec<Value> {
        self.h.json(&["fleet", "machines"])["machines"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// Waits until the peer at `address` shows `state` in `fleet machines`.
    pub fn wait_peer(&self, address: &str, state: &str) -> Value {
        let mut found = Value::Null;
        wait_until(&format!("{address} {state} on {}", self.name), || {
            found = self
                .machines()
                .into_iter()
                .find(|m| m["address"] == address)
                .unwrap_or(Value::Null);
            found["state"] == state
        });
        found
    }

    /// Waits until the peer at `address` is up in `fleet machines`.
    pub fn wait_up(&self, address: &str) {
        self.wait_peer(address, "up");
    }

    /// A raw GET on this daemon's TCP listener.
    pub fn tcp_get(&self, path: &str, headers: &[(&str, &str)]) -> http::Answer {
        let addr = format!("127.0.0.1:{}", self.port);
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        let mut conn = http::tcp(&addr);
        http::exchange(&mut conn, req.as_bytes(), Duration::from_secs(30))
    }

    /// The `(seq, event)` pairs of `job` in `thread`'s inbox on this machine, in arrival order.
    pub fn inbox(&self, thread: &str, job: &str) -> Vec<(u64, String)> {
        self.h.json(&["events", "--thread", thread])["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["job"] == job)
            .map(|e| {
                (
                    e["seq"].as_u64().unwrap(),
                    e["event"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// Waits until `job`'s inbox on this machine holds `expected`.
    pub fn wait_inbox(&self, thread: &str, job: &str, expected: &[(u64, &str)]) {
        let expected: Vec<(u64, String)> =
            expected.iter().map(|(s, e)| (*s, e.to_string())).collect();
        let mut last = Vec::new();
        wait_until(
            &format!("{job}'s events {expected:?} on {}", self.name),
            || {
                last = self.inbox(thread, job);
                assert!(
                    last.len() <= expected.len() && expected.starts_with(&last),
                    "{job} on {}: {last:?}, expected {expected:?}",
                    self.name
                );
                last == expected
            },
        );
    }
}
