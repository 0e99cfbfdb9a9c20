//! Replays every fuzz corpus once, for running under valgrind (leak and memory
//! error checks that the stable-toolchain fuzzers, built without a sanitizer,
//! cannot do): `scripts/fuzz.sh` runs
//! `valgrind --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=1`
//! on it.

fn main() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus"));
    let dir = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.to_path_buf());
    match workload_identity::fuzzing::replay_corpora(&dir) {
        Ok(counts) => {
            for (name, n) in counts {
                println!("replayed {n} inputs of {name}");
            }
        }
        Err(e) => {
            eprintln!("replay_corpus: reading {}: {e}", dir.display());
            std::process::exit(2);
        }
    }
}
