//! Support shared by the test suites of the workspace (this crate's end-to-end tests, the
//! worker's and the shared crate's integration tests, the daemon's unit tests): the Docker
//! test image, imported from busybox-static because there is no registry, and the probe
//! program that rewrites its environment as `setproctitle` does.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nix::fcntl::{Flock, FlockArg};
use std::fs::{self, OpenOptions};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

pub const TAG: &str = "homebased-test:busybox";
const APPLETS: &[&str] = &["sh", "sleep", "echo", "cat", "env", "ls", "true", "kill"];
pub const SKIP_VAR: &str = "HOMEBASED_TEST_SKIP_DOCKER";

/// The pinned test image (imported once per machine) (`sha256:<64 hex>`), or `None` when Docker tests are skipped.
pub fn image() -> Option<String> {
    if std::env::var(SKIP_VAR).is_ok_and(|v| v == "1") {
        eprintln!("note: {SKIP_VAR}=1: skipping a test that needs Docker");
        return None;
    }
    static IMAGE: OnceLock<Result<String, String>> = OnceLock::new();
    match IMAGE.get_or_init(prepare_image) {
        Ok(id) => Some(id.clone()),
        Err(e) => panic!(
            "Docker is not usable: {e}\nThe container tests need a running Docker engine \
             (`dockerd`) and /bin/busybox (busybox-static); set {SKIP_VAR}=1 to skip them."
        ),
    }
}

/// Imports the busybox image once; a file lock keeps concurrent test processes from
/// importing it twice.
fn prepare_image() -> Result<String, String> {
    docker(&["info", "--format", "{{.ServerVersion}}"])?;
    let lock_path = std::env::temp_dir().join("homebased-test-image.lock");
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("{}: {e}", lock_path.display()))?;
    let _held = Flock::lock(lock_file, FlockArg::LockExclusive)
        .map_err(|(_, e)| format!("cannot lock {}: {e}", lock_path.display()))?;
    let inspect = ["image", "inspect", "--format", "{{.Id}}", TAG];
    if let Ok(id) = docker(&inspect) {
        return Ok(id.trim().to_string());
    }
    let busybox = Path::new("/bin/busybox");
    if !busybox.exists() {
        return Err("/bin/busybox is missing (install busybox-static)".into());
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let bin = tmp.path().join("bin");
    fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
    fs::copy(busybox, bin.join("busybox")).map_err(|e| e.to_string())?;
    for applet in APPLETS {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).map_err(|e| e.to_string())?;
    }
    let mut tar = Command::new("tar")
        .arg("-C")
        .arg(tmp.path())
        .args(["-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("tar: {e}"))?;
    let archive = tar.stdout.take().ok_or("tar has no stdout")?;
    let import = Command::new("docker")
        .args(["import", "-", TAG])
        .stdin(archive)
        .output()
        .map_err(|e| format!("docker import: {e}"))?;
    let _ = tar.wait();
    if !import.status.success() {
        return Err(format!(
            "docker import: {}",
            String::from_utf8_lossy(&import.stderr)
        ));
    }
    Ok(docker(&inspect)?.trim().to_string())
}

/// `docker <args>`: stdout, or stderr as the error.
pub fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run docker: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `probe.c` compiled into `dir`: a process that rewrites its environment block in place, as
/// `setproctitle` does (Ray, gunicorn, vLLM), and ignores TERM; see the source for its modes.
pub fn compile_probe(dir: &Path) -> std::path::PathBuf {
    let source = dir.join("probe.c");
    fs::write(&source, include_str!("probe.c")).unwrap();
    let binary = dir.join("probe");
    let status = Command::new("cc")
        .args(["-pthread", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("cc compiles the probe");
    assert!(status.success(), "cc: {status}");
    binary
}
