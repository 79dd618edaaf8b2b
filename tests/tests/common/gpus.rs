//! A fake `nvidia-smi` that lists given cards for `-L` and answers
//! `--query-compute-apps=...` from a file the test writes (or fails while a fail file
//! exists), so tests can shift indices between starts and put processes on cards.

use super::TestHome;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// A hardware UUID for card `n` of a test.
pub fn card_uuid(n: u32) -> String {
    format!("GPU-{n:08x}-aaaa-bbbb-cccc-ddddeeeeffff")
}

/// The file the fake answers the compute-apps query from (`gpu_uuid, pid, used_memory`).
pub fn compute_apps(h: &TestHome) -> PathBuf {
    h.tmp().join("compute-apps.csv")
}

/// While this file exists the compute-apps query fails.
pub fn compute_apps_fail(h: &TestHome) -> PathBuf {
    h.tmp().join("compute-apps.fail")
}

/// Installs the fake: device `i` of the listing is `cards[i]` (a card number for
/// [`card_uuid`]). Takes effect for `-L` at the next daemon start.
pub fn set_cards(h: &TestHome, cards: &[u32]) {
    let mut listing = String::new();
    for (index, card) in cards.iter().enumerate() {
        listing.push_str(&format!(
            "GPU {index}: NVIDIA H200 (UUID: {})\n",
            card_uuid(*card)
        ));
    }
    let script = format!(
        "#!/bin/sh\ncase \"$1\" in\n  -L) printf '%s' '{listing}' ;;\n  \
         --query-compute-apps=*)\n    if [ -e '{fail}' ]; then echo 'query failed' >&2; exit 9; fi\n    \
         cat '{apps}' 2>/dev/null; exit 0 ;;\n  *) exit 2 ;;\nesac\n",
        fail = compute_apps_fail(h).display(),
        apps = compute_apps(h).display(),
    );
    let staging = h.tmp().join("bin/.nvidia-smi.new");
    std::fs::write(&staging, script).unwrap();
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&staging, h.probe_path()).unwrap();
}
