//! Discovery from the DGX-2 hwloc export (16 GPUs, 12 NVSwitches, 60
//! bridges): load, convert, serialise. Goal: well under 50 ms.

use std::path::PathBuf;

use accord_agent::{discover, Sources};
use criterion::{criterion_group, criterion_main, Criterion};

fn dgx2(c: &mut Criterion) {
    let xml =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hwloc/nvidiaDGX2.xml");
    c.bench_function("discover_dgx2_export", |b| {
        b.iter(|| {
            let hw = discover(Sources {
                hwloc_xml: Some(&xml),
                ..Sources::default()
            })
            .expect("DGX-2 export loads");
            serde_json::to_vec(&hw).expect("serialises")
        })
    });
}

criterion_group!(benches, dgx2);
criterion_main!(benches);
