//! Replays every fuzz corpus once (the library's targets and the C ABI's), for running under valgrind (leak and memory
//! error checks that the stable-toolchain fuzzers, built without a sanitizer,
//! cannot do): `scripts/fuzz.sh` runs
//! `valgrind --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=1`
//! on it.

fn main() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus"));
    let dir = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.to_path_buf());
    // The library's targets, then the C ABI's.
    let counts = workload_identity::fuzzing::replay_corpora(&dir).and_then(|mut counts| {
        let ffi = workload_identity::fuzzing::replay_corpus(
            &dir.join("ffi"),
            workload_identity_ffi::fuzzing::ffi,
        )?;
        counts.push(("ffi", ffi));
        Ok(counts)
    });
    match counts {
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
