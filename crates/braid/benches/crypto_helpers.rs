//! One large batch (64 data messages of 1420 bytes) sealed by the thread
//! that holds it alone, and with crypto helper threads taking parts of it:
//! what the helpers give when there are cores free for them. In the
//! daemon they only start for cores beyond two; this measures the
//! mechanism (split, wake, wait) on whatever cores this machine has.
//!
//! `cargo bench -p braid --bench crypto_helpers`

use braid::daemon::crypto_helpers::{CryptoHelpers, MAX_HELPERS};
use braid_core::batch::PacketBatch;
use braid_core::cipher::{write_data_header, DataCipher, DataKeys};
use braid_core::device::CryptoJobs;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

const PACKETS: usize = 64;
const PACKET: usize = 1420;

/// A batch of data messages ready to seal, and their jobs.
fn batch(cipher: DataCipher, keys: &Arc<DataKeys>) -> (PacketBatch, CryptoJobs) {
    let mut batch = PacketBatch::new(PACKETS, 2048);
    let mut jobs = CryptoJobs::new();
    let addr: SocketAddr = "198.18.0.2:51820".parse().unwrap();
    for i in 0..PACKETS {
        batch.push_with(0, addr, |buf| {
            write_data_header(buf, cipher, 1, i as u64, PACKET, PACKET)
        });
        jobs.push(i, 0, keys);
    }
    (batch, jobs)
}

fn seal_batch(c: &mut Criterion) {
    let keys = Arc::new(DataKeys::new(
        &[7; 32],
        &[9; 32],
        Some(braid_core::cipher::AesLibrary::Ring),
    ));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut group = c.benchmark_group("seal_batch_64x1420");
    group.throughput(Throughput::Bytes((PACKETS * PACKET) as u64));
    for cipher in [DataCipher::ChaCha20Poly1305, DataCipher::Aes256Gcm] {
        for n in 0..cores.clamp(2, MAX_HELPERS + 1) {
            let helpers = CryptoHelpers::new(n, "bench-seal", Arc::new(AtomicU64::new(0)), None)
                .expect("start helper threads");
            let (mut batch, mut jobs) = batch(cipher, &keys);
            let id = BenchmarkId::new(cipher.name(), format!("{n} helpers"));
            group.bench_function(id, |b| b.iter(|| helpers.seal(&mut jobs, &mut batch)));
        }
    }
    group.finish();
}

criterion_group!(benches, seal_batch);
criterion_main!(benches);
