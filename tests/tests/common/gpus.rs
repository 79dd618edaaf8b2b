//! A fake `nvidia-smi` that lists given cards for `-L` and answers
//! `--query-compute-apps=...` from a file the test writes (or fails while a fail file
//! exists), so tests can shift indices between starts and put processes on cards. It answers
//! `--query-gpu=<fields>` with the fields asked, in the order asked, from one file per card
//! (`<field>=<value>` lines; a field not written is `[N/A]`), or with a raw answer, or hangs.

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

/// The folder of the state files, one per card, answered in name order.
pub fn gpu_state_dir(h: &TestHome) -> PathBuf {
    h.tmp().join("gpu-state")
}

/// Sets card `card`'s state: `(field, value)` pairs as `--query-gpu` names them
/// (`memory.used`, ...). Its `uuid` is written too; a field left out is `[N/A]`. Written
/// whole (rename), so the fake never reads half a file.
pub fn set_gpu_state(h: &TestHome, card: u32, fields: &[(&str, &str)]) {
    let dir = gpu_state_dir(h);
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = format!("uuid={}\n", card_uuid(card));
    for (field, value) in fields {
        text.push_str(&format!("{field}={value}\n"));
    }
    let staging = h.tmp().join(format!(".gpu-state-{card}"));
    std::fs::write(&staging, text).unwrap();
    std::fs::rename(&staging, dir.join(format!("card-{card:04}"))).unwrap();
}

/// Card `card` is no longer in the state query's answer.
pub fn remove_gpu_state(h: &TestHome, card: u32) {
    std::fs::remove_file(gpu_state_dir(h).join(format!("card-{card:04}"))).unwrap();
}

/// While this file exists the state query prints it instead (garbage, odd columns).
pub fn gpu_state_raw(h: &TestHome) -> PathBuf {
    h.tmp().join("gpu-state.raw")
}

/// While this file exists the state query hangs (a stuck driver).
pub fn gpu_state_hang(h: &TestHome) -> PathBuf {
    h.tmp().join("gpu-state.hang")
}

/// Installs the fake: device `i` of the listing is `cards[i]` (a card number for
/// [`card_uuid`]). Takes effect for `-L` at the next daemon start.
pub fn set_cards(h: &TestHome, cards: &[u32]) {
    let split: Vec<(u32, &[u32])> = cards.iter().map(|c| (*c, &[][..])).collect();
    set_split_cards(h, &split);
}

/// A MIG instance's UUID: instance `instance` of card `card`, in layout `layout` (a resized
/// layout gives its instances new UUIDs).
pub fn mig_uuid(card: u32, instance: u32, layout: u32) -> String {
    format!("MIG-{card:04x}{instance:04x}-{layout:04x}-bbbb-cccc-ddddeeeeffff")
}

/// As [`set_cards`], each card with the MIG instances listed under it (none: a whole card),
/// in layout 0 of [`mig_uuid`]; the spacing of the MIG lines is as drivers print it.
pub fn set_split_cards(h: &TestHome, cards: &[(u32, &[u32])]) {
    set_layout(h, cards, 0);
}

/// As [`set_split_cards`], with the instances' UUIDs of layout `layout`.
pub fn set_layout(h: &TestHome, cards: &[(u32, &[u32])], layout: u32) {
    let mut listing = String::new();
    for (index, (card, instances)) in cards.iter().enumerate() {
        listing.push_str(&format!(
            "GPU {index}: NVIDIA H200 (UUID: {})\n",
            card_uuid(*card)
        ));
        for instance in *instances {
            listing.push_str(&format!(
                "  MIG 3g.71gb     Device  {instance}: (UUID: {})\n",
                mig_uuid(*card, *instance, layout)
            ));
        }
    }
    let script = FAKE
        .replace("@LISTING@", &listing)
        .replace("@FAIL@", &compute_apps_fail(h).display().to_string())
        .replace("@APPS@", &compute_apps(h).display().to_string())
        .replace("@HANG@", &gpu_state_hang(h).display().to_string())
        .replace("@RAW@", &gpu_state_raw(h).display().to_string())
        .replace("@STATES@", &gpu_state_dir(h).display().to_string());
    let staging = h.tmp().join("bin/.nvidia-smi.new");
    std::fs::write(&staging, script).unwrap();
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&staging, h.probe_path()).unwrap();
}

/// The fake's script: `-L` prints the listing; the state query prints, for each card file,
/// the fields asked in the order asked (`[N/A]` for a field the file does not have).
const FAKE: &str = r#"#!/bin/sh
case "$1" in
  -L) printf '%s' '@LISTING@' ;;
  --query-compute-apps=*)
    if [ -e '@FAIL@' ]; then echo 'query failed' >&2; exit 9; fi
    cat '@APPS@' 2>/dev/null; exit 0 ;;
  --query-gpu=*)
    if [ -e '@HANG@' ]; then exec sleep 600; fi
    if [ -e '@RAW@' ]; then cat '@RAW@'; exit 0; fi
    fields="${1#--query-gpu=}"
    for card in '@STATES@'/card-*; do
      [ -e "$card" ] || continue
      line=''
      IFS=,
      for name in $fields; do
        value=$(sed -n "s/^$name=//p" "$card" | head -n 1)
        [ -n "$value" ] || value='[N/A]'
        line="${line:+$line, }$value"
      done
      unset IFS
      printf '%s\n' "$line"
    done
    exit 0 ;;
  *) exit 2 ;;
esac
"#;
