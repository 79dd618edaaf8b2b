//! Property tests of the daemon's parsers of outside output: `nvidia-smi -L`.

#![allow(clippy::unwrap_used)]

use homebased::detection::parse_nvidia_smi_list;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn nvidia_smi_output_never_panics_the_parser(text in "(GPU [0-9]{0,3}:? ?.{0,30}\n|.{0,40}\n){0,10}") {
        let gpus = parse_nvidia_smi_list(&text);
        // Sorted by index, each index once, whatever came in.
        prop_assert!(gpus.windows(2).all(|w| w[0].index < w[1].index));
    }

    #[test]
    fn every_listed_gpu_is_found_with_its_uuid_among_other_lines(
        devices in prop::collection::btree_map(0u32..64, "[0-9a-f]{8}", 0..8),
        model in "[A-Za-z0-9 -]{1,24}",
        noise in prop::collection::vec("(  MIG [0-9]g\\.[0-9]+gb Device [0-9]: \\(UUID: MIG-[0-9a-f]{8}\\)|No devices were found|)", 0..4),
    ) {
        let mut lines: Vec<String> = devices
            .iter()
            .map(|(index, uuid)| format!("GPU {index}: NVIDIA {model} (UUID: GPU-{uuid})"))
            .collect();
        // MIG sub-lines and other chatter between them are ignored.
        for (i, line) in noise.into_iter().enumerate() {
            lines.insert(i.min(lines.len()), line);
        }
        let gpus = parse_nvidia_smi_list(&lines.join("\n"));
        let found: Vec<(u32, Option<String>)> =
            gpus.into_iter().map(|g| (g.index, g.uuid)).collect();
        let expected: Vec<(u32, Option<String>)> = devices
            .into_iter()
            .map(|(index, uuid)| (index, Some(format!("GPU-{uuid}"))))
            .collect();
        prop_assert_eq!(found, expected);
    }
}
