//! The etcd mirror against the memory store, side by side in one run.
//!
//! `cargo bench --features etcd --bench etcd_mirror` (as root, with Debian's
//! `etcd-server`: it starts a one-member etcd on loopback, as the cluster tests
//! do, and stops it at the end).
//!
//! Rows: `verify` through the memory store, through `EtcdMirror` (Stale reads
//! from memory) and through `EtcdStore` (a serializable read per token); and
//! the lookup alone (`allocation_state`, Stale) for the memory store and the
//! mirror. Before the rows it prints the heap the mirror holds per allocation
//! (a counting allocator over the listing of 20,000 records).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use criterion::{Criterion, criterion_group, criterion_main};
use workload_identity::model::Allocation;
use workload_identity::{
    Audience, Consistency, EtcdMirror, EtcdStore, Issuer, Keyring, MemoryStore, StateStore,
    Verifier,
};

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/etcd_support/mod.rs"]
mod etcd_support;

use etcd_support::{Cluster, Options, PREFIX, Security};

/// Counts the bytes live on the heap.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout is passed on as it came.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

const RECORDS: usize = 20_000;

fn alloc(id: &str) -> Allocation {
    Allocation {
        id: id.into(),
        client_status: "running".into(),
        ..common::allocation()
    }
}

fn bench(c: &mut Criterion) {
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    // Fill the prefix with 20,000 records, 100 to a transaction.
    for chunk in (0..RECORDS).collect::<Vec<_>>().chunks(100) {
        let ops: Vec<serde_json::Value> = chunk
            .iter()
            .map(|i| {
                let id = format!("alloc-{i:05}");
                let value = workload_identity::codec::encode(&alloc(&id)).unwrap();
                serde_json::json!({"request_put": {
                    "key": STANDARD.encode(format!("{PREFIX}/allocations/{id}")),
                    "value": STANDARD.encode(value),
                }})
            })
            .collect();
        cluster.admin_any("/v3/kv/txn", &serde_json::json!({ "success": ops }));
    }

    let before = LIVE.load(Ordering::Relaxed);
    let mirror = Arc::new(
        EtcdMirror::builder(cluster.config(0, &[0]))
            .start()
            .unwrap(),
    );
    assert!(
        mirror.wait_ready(Duration::from_secs(30)),
        "{:?}",
        mirror.stats()
    );
    std::thread::sleep(Duration::from_millis(200));
    let held = LIVE.load(Ordering::Relaxed) - before;
    let s = mirror.stats();
    assert_eq!(s.allocations, RECORDS);
    println!(
        "mirror of {RECORDS} allocations: {held} heap bytes live ({:.1} per allocation, including \
         the client and its threads); its own accounting says {} ({:.1} per allocation)",
        held as f64 / RECORDS as f64,
        s.approx_bytes,
        s.approx_bytes as f64 / RECORDS as f64
    );

    let now = workload_identity::unix_now();
    let keyring = Keyring::new();
    keyring.rotate(now).unwrap();
    let issuer = Issuer::new(keyring.clone());
    let mut req = common::issue_request_task();
    req.allocation.id = "alloc-12345".into();
    let token = issuer.issue(&req, now).unwrap().token;
    let memory = Arc::new(MemoryStore::new());
    for i in 0..RECORDS {
        memory.upsert(&alloc(&format!("alloc-{i:05}")));
    }
    let store = Arc::new(EtcdStore::new(cluster.config(0, &[0])).unwrap());
    let audience = Audience::new("vault.io").unwrap();
    let verifier =
        |s: Arc<dyn StateStore>| Verifier::builder(keyring.clone(), s, audience.clone()).build();
    let (vm, vx, ve) = (
        verifier(memory.clone()),
        verifier(mirror.clone()),
        verifier(store.clone()),
    );
    for v in [&vm, &vx, &ve] {
        v.verify(&token, now).unwrap();
    }

    let mut g = c.benchmark_group("state stores");
    g.bench_function("verify, memory store", |b| {
        b.iter(|| vm.verify(black_box(&token), now).unwrap())
    });
    g.bench_function("verify, etcd mirror", |b| {
        b.iter(|| vx.verify(black_box(&token), now).unwrap())
    });
    g.bench_function("verify, etcd store (serializable read)", |b| {
        b.iter(|| ve.verify(black_box(&token), now).unwrap())
    });
    g.bench_function("lookup, memory store", |b| {
        b.iter(|| memory.allocation_state(black_box("alloc-12345"), Consistency::Stale))
    });
    g.bench_function("lookup, etcd mirror", |b| {
        b.iter(|| mirror.allocation_state(black_box("alloc-12345"), Consistency::Stale))
    });
    g.finish();
    let s = mirror.stats();
    assert!(
        s.stale_from_cluster == 0 || s.stale_from_memory > 1000 * s.stale_from_cluster,
        "{s:?}"
    );
    println!("mirror after the rows: {s:?}");
}

criterion_group!(benches, bench);
criterion_main!(benches);
