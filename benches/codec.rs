//! msgpack codec cost: decoding what Go sends (a whole allocation inside an
//! `IssueRequest`) and encoding our view of it.
//!
//! `cargo bench --bench codec`

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use workload_identity::codec;
use workload_identity::model::IssueRequest;

const GO_REQUEST: &[u8] = include_bytes!("../tests/vectors/msgpack/issue_request_task.msgpack");

fn bench(c: &mut Criterion) {
    c.bench_function("decode IssueRequest (Go bytes, 691 B)", |b| {
        b.iter(|| codec::decode::<IssueRequest>(black_box(GO_REQUEST)).unwrap())
    });
    let req: IssueRequest = codec::decode(GO_REQUEST).unwrap();
    c.bench_function("encode IssueRequest", |b| {
        b.iter(|| codec::encode(black_box(&req)).unwrap())
    });
    let raw = rmp_serde::to_vec_named(&req).unwrap();
    c.bench_function(
        "rmp_serde::from_slice IssueRequest (no scan, baseline)",
        |b| b.iter(|| rmp_serde::from_slice::<IssueRequest>(black_box(&raw)).unwrap()),
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
