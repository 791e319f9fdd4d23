#![allow(clippy::disallowed_methods)] // a benchmark reads the clock for its virtual time origin
//! The per-packet work of the protocol core: seal and open of a 1420-byte
//! data message with each cipher, the replay window, and the reorder
//! window in order and with every other packet swapped.
//!
//! `cargo bench -p braid-core --bench data_path`

use braid_core::cipher::{write_data_header, DataCipher, DataKeys};
use braid_core::crypto::TAG_LEN;
use braid_core::messages::DATA_HEADER_LEN;
use braid_core::reorder::{ReorderConfig, ReorderWindow};
use braid_core::replay::ReplayWindow;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::{Duration, Instant};

const PACKET: usize = 1420;

fn seal_open(c: &mut Criterion) {
    let (k1, k2) = ([7u8; 32], [9u8; 32]);
    let sender = DataKeys::new(&k1, &k2, Some(braid_core::cipher::AesLibrary::Ring));
    let receiver = DataKeys::new(&k2, &k1, Some(braid_core::cipher::AesLibrary::Ring));
    let mut group = c.benchmark_group("aead_1420");
    group.throughput(Throughput::Bytes(PACKET as u64));
    for cipher in [DataCipher::ChaCha20Poly1305, DataCipher::Aes256Gcm] {
        let mut buf = vec![0x5au8; DATA_HEADER_LEN + PACKET + TAG_LEN];
        let mut counter = 0u64;
        group.bench_function(BenchmarkId::new("seal", cipher.name()), |b| {
            b.iter(|| {
                counter += 1;
                let n = write_data_header(&mut buf, cipher, 1, counter, PACKET, PACKET);
                sender.seal(black_box(&mut buf[..n]));
            })
        });
        // Opening needs a valid message each time: seal once, open a copy.
        let n = write_data_header(&mut buf, cipher, 1, 1, PACKET, PACKET);
        sender.seal(&mut buf[..n]);
        let sealed = buf[..n].to_vec();
        let mut work = sealed.clone();
        group.bench_function(BenchmarkId::new("open", cipher.name()), |b| {
            b.iter(|| {
                work.copy_from_slice(&sealed);
                receiver.open(black_box(&mut work)).expect("authentic")
            })
        });
    }
    group.finish();
}

fn replay(c: &mut Criterion) {
    let mut group = c.benchmark_group("replay_window");
    group.bench_function("in_order", |b| {
        let mut w = ReplayWindow::new();
        let mut counter = 0u64;
        b.iter(|| {
            counter += 1;
            black_box(w.check(counter) && w.update(counter))
        })
    });
    group.bench_function("swapped_pairs", |b| {
        let mut w = ReplayWindow::new();
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            let counter = i ^ 1;
            black_box(w.check(counter) && w.update(counter))
        })
    });
    group.finish();
}

fn reorder(c: &mut Criterion) {
    let packet = [0x45u8; PACKET];
    let cfg = ReorderConfig {
        hold_ceiling: Duration::from_millis(50),
        ..ReorderConfig::default()
    };
    let mut group = c.benchmark_group("reorder_window_1420");
    group.throughput(Throughput::Elements(1));
    group.bench_function("in_order_passes_through", |b| {
        let mut w = ReorderWindow::new(cfg.clone());
        let now = Instant::now();
        let mut counter = 0u64;
        b.iter(|| {
            if w.passes_through(counter) {
                w.delivered_in_place(now, counter, 0);
            } else {
                w.insert(now, counter, 0, &packet);
                while w.pop_ready().is_some() {}
            }
            counter += 1;
        })
    });
    group.bench_function("swapped_pairs_buffered", |b| {
        let mut w = ReorderWindow::new(cfg.clone());
        let now = Instant::now();
        let mut i = 0u64;
        b.iter(|| {
            let counter = i ^ 1;
            if w.passes_through(counter) {
                w.delivered_in_place(now, counter, 0);
            } else {
                black_box(w.insert(now, counter, 0, &packet));
            }
            while w.pop_ready().is_some() {}
            i += 1;
        })
    });
    group.finish();
}

criterion_group!(benches, seal_open, replay, reorder);
criterion_main!(benches);
