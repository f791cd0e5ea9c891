//! Full plan time, single thread: 10,000 nodes x 8 GPUs (250 racks), 20,000
//! pending pods in 2,000 gangs with DRA claims (CEL selectors) and rack
//! topology requirements; and the same at 40,000 nodes / 80,000 pods. Every
//! node is planned with its own agent report (distinct GPU UUIDs and
//! serials; some with 7 GPUs, some with MIG on a GPU), installed with
//! `Fleet::apply_report`. Goals: under 100 ms and under 300 ms.

use accord::plan::plan;
use criterion::{criterion_group, criterion_main, Criterion};

/// The same allocator as `accordctl plan`, whose planning this measures.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn planner(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    group.sample_size(10);
    let fleet = accord_benches::fleet_reported(250, 40, 1);
    let demand = accord_benches::demand(2_000, 10, 2);
    group.bench_function("10k_nodes_20k_pods_2k_gangs", |b| {
        b.iter(|| plan(&fleet, &demand, &fleet.policy, 1_000_000))
    });
    drop(fleet);
    let fleet = accord_benches::fleet_reported(1_000, 40, 1);
    let demand = accord_benches::demand(8_000, 10, 2);
    group.bench_function("40k_nodes_80k_pods_8k_gangs", |b| {
        b.iter(|| plan(&fleet, &demand, &fleet.policy, 1_000_000))
    });
    group.finish();
}

criterion_group!(benches, planner);
criterion_main!(benches);
