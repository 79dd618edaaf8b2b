//! Running every `homebased` command of a [`TestHome`] (its daemon included) as another,
//! unprivileged account, through `setpriv`, with exactly the environment the daemon needs.

use super::{homebased_bin, run_bounded, worker_bin, TestHome};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `PATH` of the unprivileged CLI (and so of its jobs' steps).
pub const PLAIN_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The account commands run as, and the `setpriv` that switches to it.
#[derive(Debug, Clone)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub setpriv: PathBuf,
}

/// Gives `path` and everything under it to `uid:gid` (symlinks are not followed).
fn chown_tree(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
    if std::fs::symlink_metadata(path).unwrap().is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid, gid);
        }
    }
}

impl TestHome {
    /// From now on every command runs as `account`, which is given the temporary directory.
    pub fn run_as(&mut self, account: Account) {
        chown_tree(self.tmp(), account.uid, account.gid);
        self.account = Some(account);
        self.make_binaries_reachable();
    }

    /// The built binaries may sit under a directory the account cannot traverse: then run
    /// copies in the temporary directory (the daemon finds the worker beside itself).
    fn make_binaries_reachable(&mut self) {
        if self.cli(&["version"]).code() == 0 {
            return;
        }
        let dir = self.tmp().join("binaries");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        for bin in [homebased_bin(), worker_bin()] {
            let copy = dir.join(bin.file_name().unwrap());
            std::fs::copy(&bin, &copy).unwrap();
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        self.bin = dir.join("homebased");
        let out = self.cli(&["version"]);
        let name = self
            .account
            .as_ref()
            .map(|a| a.name.as_str())
            .unwrap_or_default();
        assert_eq!(
            out.code(),
            0,
            "{name} cannot run copies of the binaries either: {out:?}"
        );
    }

    /// `setpriv ... -- homebased` as `account`, with nothing of the test's environment.
    pub(super) fn command_as(&self, account: &Account) -> Command {
        let user = self.tmp().join("user");
        let mut cmd = Command::new(&account.setpriv);
        cmd.env_clear()
            .arg(format!("--reuid={}", account.uid))
            .arg(format!("--regid={}", account.gid))
            .arg("--clear-groups")
            .arg("--")
            .arg(&self.bin)
            .env("PATH", PLAIN_PATH)
            .env("HOME", &user)
            .env("XDG_STATE_HOME", user.join("state"))
            .env("XDG_CONFIG_HOME", user.join(".config"))
            .env("HOMEBASED_NVIDIA_SMI", self.probe_path())
            .current_dir(self.workdir());
        cmd
    }
}

/// The unprivileged account the Attention tests run their daemon and CLI as.
pub const TEST_USER: &str = "homebased-test";
/// Set to `1` to skip the tests that need root, `useradd` and `setpriv`.
pub const SKIP_UNPRIVILEGED: &str = "HOMEBASED_TEST_SKIP_UNPRIVILEGED";

/// `name` on `PATH`, or in the usual system directories (root's `PATH` may lack `sbin`).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .filter(|d| !d.is_empty())
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
    found
}

fn lookup_user() -> Option<nix::unistd::User> {
    nix::unistd::User::from_name(TEST_USER).ok().flatten()
}

/// The `homebased-test` account (created if missing), or `None` when the caller asked to
/// skip. Without root, `setpriv` or `useradd` the test fails: CI provides all three.
pub fn unprivileged_account() -> Option<Account> {
    if std::env::var_os(SKIP_UNPRIVILEGED).is_some_and(|v| v == "1") {
        eprintln!("skipped: {SKIP_UNPRIVILEGED}=1");
        return None;
    }
    let how = format!(
        "(CI runs as root with util-linux and passwd installed; set {SKIP_UNPRIVILEGED}=1 to \
         skip this test elsewhere)"
    );
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test must run as root: it creates the user {TEST_USER} and runs the daemon as \
         that user, because root reads every environment and so never sees a suspect {how}"
    );
    let setpriv = find_program("setpriv")
        .unwrap_or_else(|| panic!("setpriv is not installed (package util-linux) {how}"));
    let user = match lookup_user() {
        Some(user) => user,
        None => {
            let useradd = find_program("useradd")
                .unwrap_or_else(|| panic!("useradd is not installed (package passwd) {how}"));
            let out = run_bounded(
                {
                    let mut cmd = Command::new(useradd);
                    cmd.args([
                        "--system",
                        "--no-create-home",
                        "--shell",
                        "/usr/sbin/nologin",
                        TEST_USER,
                    ]);
                    cmd
                },
                None,
            );
            // Another test process may have created it meanwhile: look it up again.
            lookup_user().unwrap_or_else(|| {
                panic!(
                    "useradd could not create {TEST_USER} (exit {:?}): {} {how}",
                    out.status.code(),
                    out.stderr
                )
            })
        }
    };
    Some(Account {
        name: TEST_USER.to_string(),
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        setpriv,
    })
}
