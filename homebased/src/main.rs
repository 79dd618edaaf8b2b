fn main() {
    // Named crash points (docs/RELIABILITY.md): configured from FAILPOINTS, inert without it.
    // Kept alive until exit; `process::exit` never tears it down.
    #[cfg(feature = "failpoints")]
    let _crash_points = fail::FailScenario::setup();
    std::process::exit(homebased::cli::main());
}
