fn main() {
    std::process::exit(homebased::cli::main());
}
