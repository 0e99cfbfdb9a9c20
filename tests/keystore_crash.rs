//! Crash safety of keystore and identity-state saves: a child process saving
//! keyrings and identity states in a loop is killed (SIGKILL) at random points
//! 200 times; after every kill each file must load, whole, as one of the values
//! the child saved — never a mix, never a partial file — and never an older one
//! than the last seen.
//!
//! A plain binary (`harness = false`): run as the parent by `cargo test`, and as
//! the child when `WID_CRASH_CHILD` names the keystore path.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use workload_identity::manager::{
    DerivedSecret, FileIdentityDb, IdentityDb, IdentityId, IdentityToken, PersistedState,
};
use workload_identity::{KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring, RootKey};

const CHILD_ENV: &str = "WID_CRASH_CHILD";
const START_ENV: &str = "WID_CRASH_START";
const KILLS: usize = 200;
/// How long the parent waits for a child's first complete save: generous, as
/// spawn, binary load and two fsynced saves can be slow on a loaded host.
const READY_LIMIT: Duration = Duration::from_secs(30);

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

const ALLOC: &str = "crash-alloc";

/// The identity state of generation `g`: 1 to 3 tokens, a secret and a
/// replaced one, all carrying `g`.
fn identity_state(g: u64) -> PersistedState {
    let n = 1 + (g % 3) as usize;
    PersistedState {
        identities: (0..n)
            .map(|i| IdentityToken {
                key: IdentityId::new("task", &format!("id{i}")),
                token: format!("token-{g}-{i}-{}", "x".repeat((g % 200) as usize)),
                kid: format!("g{g}-k0"),
                jwt_id: format!("jti-{g}-{i}"),
                issued_at: g as i64,
                expires_at: Some(g as i64 + 3600),
                workload_key: None,
            })
            .collect(),
        secrets: vec![DerivedSecret {
            exchange: "consul".into(),
            identity: IdentityId::new("task", "id0"),
            secret: format!("secret-{g}"),
            derived_from: format!("jti-{g}-0"),
            origin: format!("consul https://consul-{g}; method nomad"),
        }],
        // A replaced secret not yet revoked: it survives the crash too.
        releasing: vec![DerivedSecret {
            exchange: "consul".into(),
            identity: IdentityId::new("task", "id0"),
            secret: format!("replaced-{g}"),
            derived_from: format!("jti-{}-0", g.saturating_sub(1)),
            origin: format!("consul https://consul-{g}; method nomad"),
        }],
    }
}

fn child(path: &str, start: u64) -> ! {
    let db = FileIdentityDb::new(std::path::Path::new(path).parent().unwrap());
    for g in start.. {
        Keyring::from_keys(generation(g))
            .and_then(|kr| kr.save(path))
            .unwrap_or_else(|e| panic!("child save of generation {g} failed: {e}"));
        db.store(ALLOC, &identity_state(g))
            .unwrap_or_else(|e| panic!("child identity save of generation {g} failed: {e}"));
        if g == start {
            // Tell the parent the first keyring + identity save is complete, so
            // its kill lands in a later save however slow the start-up was.
            let mut out = std::io::stdout();
            out.write_all(b"s")
                .and_then(|()| out.flush())
                .unwrap_or_else(|e| panic!("child could not signal the parent: {e}"));
        }
    }
    unreachable!()
}

/// Wait (up to [`READY_LIMIT`]) for the child's one-byte "first save done".
fn wait_for_first_save(child: &mut Child, round: usize) {
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        let _ = tx.send(stdout.read_exact(&mut byte).map(|()| byte[0]));
    });
    match rx.recv_timeout(READY_LIMIT) {
        Ok(Ok(b's')) => {}
        Ok(other) => {
            let _ = child.kill();
            panic!(
                "round {round}: the child did not report its first save: {other:?} ({:?})",
                child.wait()
            );
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("round {round}: the child's first save took over {READY_LIMIT:?}");
        }
    }
}

/// Which generation a loaded keyring is, after checking it is exactly that one.
fn whole_generation(kr: &Keyring) -> u64 {
    let keys = kr.keys();
    let first = keys[0].kid.as_str();
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
    let mut last_identity = 0u64;
    let db = FileIdentityDb::new(dir.path());
    let mut advanced = 0;
    for round in 0..KILLS {
        let mut child = Command::new(&exe)
            .env(CHILD_ENV, &path)
            .env(START_ENV, (last_seen + 1).to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // The kill lands 0 to 40 ms after the child's first complete save, so
        // every round has a save to advance by and a later one to interrupt.
        wait_for_first_save(&mut child, round);
        // xorshift: a kill point between 0 and 40 ms after the first save.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_micros(rng % 40_000));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "round {round}: the child must have been killed"
        );

        assert!(
            path.exists(),
            "round {round}: the keystore is missing after a reported save"
        );
        let kr = Keyring::load(&path)
            .unwrap_or_else(|e| panic!("round {round}: keystore not whole after a kill: {e}"));
        let g = whole_generation(&kr);
        assert!(
            g >= last_seen,
            "round {round}: went back from generation {last_seen} to {g}"
        );
        // The child reported generation `last_seen + 1` saved before the kill.
        assert!(
            g > last_seen,
            "round {round}: generation {g} lost the reported save of {}",
            last_seen + 1
        );
        advanced += 1;
        last_seen = g;
        // The identity state is saved after the keystore: it is whole, of a
        // generation no newer than the keystore's (a kill between the two saves
        // leaves it behind) and never older than the last one seen.
        if let Some(state) = db
            .load(ALLOC)
            .unwrap_or_else(|e| panic!("round {round}: identity state not whole after a kill: {e}"))
        {
            let ig: u64 = state.secrets[0].secret["secret-".len()..].parse().unwrap();
            assert_eq!(
                state,
                identity_state(ig),
                "round {round}: identity state of generation {ig} differs"
            );
            assert!(
                ig <= g && ig >= last_identity,
                "round {round}: identity generation {ig} (last {last_identity}) vs keystore {g}"
            );
            last_identity = ig;
        }
    }
    assert_eq!(
        advanced, KILLS,
        "every round's reported save must be seen ({advanced} of {KILLS})"
    );
    assert!(last_identity > 0, "the identity state was never saved");
    let leftovers = std::fs::read_dir(dir.path()).unwrap().count() - 2;
    println!(
        "keystore crash test: ok: {KILLS} kills, reached generation {last_seen}, \
         {advanced} rounds advanced, {leftovers} temp files left by killed saves"
    );
}
