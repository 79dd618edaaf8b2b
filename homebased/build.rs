//! Records the git revision the binary was built from, when it is known, for
//! `homebased version`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=HOMEBASED_GIT_REVISION");
    for path in ["../.git/HEAD", "../.git/refs/heads", "../.git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if std::env::var_os("HOMEBASED_GIT_REVISION").is_some() {
        return;
    }
    let revision = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    if let Some(revision) = revision {
        println!("cargo:rustc-env=HOMEBASED_GIT_REVISION={revision}");
    }
}
