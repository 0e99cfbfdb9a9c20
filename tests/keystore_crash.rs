//! Crash safety of keystore saves: a child process saving keyrings in a loop is
//! killed (SIGKILL) at random points 200 times; after every kill the file must
//! load, whole, as one of the keyrings the child saved — never a mix, never a
//! partial file — and never an older one than the last seen.
//!
//! A plain binary (`harness = false`): run as the parent by `cargo test`, and as
//! the child when `WID_CRASH_CHILD` names the keystore path.

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use workload_identity::keyring::{KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring, RootKey};

const CHILD_ENV: &str = "WID_CRASH_CHILD";
const START_ENV: &str = "WID_CRASH_START";
const KILLS: usize = 200;

/// The keyring of generation `g`: 1 to 4 keys whose IDs and material all carry `g`.
fn generation(g: u64) -> Vec<RootKey> {
    let n = 1 + (g % 4) as usize;
    (0..n)
        .map(|i| {
            let mut material = [0u8; 32];
            material[..8].copy_from_slice(&g.to_le_bytes());
            material[8] = i as u8;
            RootKey::new(
                KeyId::new(&format!("g{g}-k{i}")).unwrap(),
                KeyMaterial::from_slice(&material).unwrap(),
                KeyDerivation::HkdfV1,
                if i + 1 == n {
                    KeyState::Active
                } else {
                    KeyState::Inactive
                },
                g as i64,
            )
        })
        .collect()
}

fn child(path: &str, start: u64) -> ! {
    for g in start.. {
        Keyring::from_keys(generation(g))
            .and_then(|kr| kr.save(path))
            .unwrap_or_else(|e| panic!("child save of generation {g} failed: {e}"));
    }
    unreachable!()
}

/// Which generation a loaded keyring is, after checking it is exactly that one.
fn whole_generation(kr: &Keyring) -> u64 {
    let keys = kr.keys();
    let first = keys[0].id.as_str();
    let g: u64 = first[1..first.find('-').unwrap()].parse().unwrap();
    let expected = generation(g);
    assert_eq!(keys.len(), expected.len(), "generation {g}: key count");
    for want in &expected {
        let got = kr
            .root_key(want.id().as_str())
            .unwrap_or_else(|| panic!("generation {g}: key {} missing", want.id()));
        assert_eq!(&got, want, "generation {g}: key {} differs", want.id());
    }
    g
}

fn main() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        let start = std::env::var(START_ENV).unwrap().parse().unwrap();
        child(&path, start);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keystore");
    let exe = std::env::current_exe().unwrap();
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("keystore crash test: {KILLS} kills, random seed {seed}");
    let mut rng = seed | 1;
    let mut last_seen = 0u64;
    let mut advanced = 0;
    for round in 0..KILLS {
        let mut child = Command::new(&exe)
            .env(CHILD_ENV, &path)
            .env(START_ENV, (last_seen + 1).to_string())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // xorshift: a kill point between 1 and 40 ms after the start.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_micros(1000 + rng % 39_000));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "round {round}: the child must have been killed"
        );

        if !path.exists() {
            assert_eq!(last_seen, 0, "round {round}: the keystore vanished");
            continue;
        }
        let kr = Keyring::load(&path)
            .unwrap_or_else(|e| panic!("round {round}: keystore not whole after a kill: {e}"));
        let g = whole_generation(&kr);
        assert!(
            g >= last_seen,
            "round {round}: went back from generation {last_seen} to {g}"
        );
        if g > last_seen {
            advanced += 1;
        }
        last_seen = g;
    }
    assert!(
        advanced > KILLS / 2,
        "saves rarely completed ({advanced} of {KILLS}); the test proves little"
    );
    let leftovers = std::fs::read_dir(dir.path()).unwrap().count() - 1;
    println!(
        "keystore crash test: ok: {KILLS} kills, reached generation {last_seen}, \
         {advanced} rounds advanced, {leftovers} temp files left by killed saves"
    );
}
