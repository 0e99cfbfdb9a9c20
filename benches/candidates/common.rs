// Shared timing loop: runs f n times, returns microseconds per call.
pub fn time<F: FnMut()>(n: u32, mut f: F) -> f64 {
    for _ in 0..(n / 10).max(1) { f(); }
    let t = std::time::Instant::now();
    for _ in 0..n { f(); }
    t.elapsed().as_secs_f64() * 1e6 / n as f64
}
pub const MSG_LEN: usize = 600;
