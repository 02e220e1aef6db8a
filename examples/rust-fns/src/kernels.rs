//! The candidates: dot products of two `f32` slices, looked up by name. Some are broken on
//! purpose, as real candidates are: one panics, one aborts the process, one never returns,
//! one is wrong.

/// A candidate: `(x, y, unroll) -> x · y`.
pub type Dot = fn(&[f32], &[f32], usize) -> f32;

/// The candidate called `name`.
pub fn by_name(name: &str) -> Option<Dot> {
    Some(match name {
        "indexed" => indexed,
        "iterator" => iterator,
        "accumulators" => accumulators,
        "off_by_one" => off_by_one,
        "aborts" => aborts,
        "spins" => spins,
        "drops_tail" => drops_tail,
        _ => return None,
    })
}

fn indexed(x: &[f32], y: &[f32], _: usize) -> f32 {
    let mut sum = 0.0;
    for i in 0..x.len() {
        sum += x[i] * y[i];
    }
    sum
}

fn iterator(x: &[f32], y: &[f32], _: usize) -> f32 {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

/// `unroll` independent partial sums (1 to 16), so that the additions pipeline and vectorize.
fn accumulators(x: &[f32], y: &[f32], unroll: usize) -> f32 {
    let mut partial = [0.0f32; 16];
    let unroll = unroll.clamp(1, 16);
    let mut chunks_x = x.chunks_exact(unroll);
    let mut chunks_y = y.chunks_exact(unroll);
    for (cx, cy) in (&mut chunks_x).zip(&mut chunks_y) {
        for k in 0..unroll {
            partial[k] += cx[k] * cy[k];
        }
    }
    let tail: f32 = iterator(chunks_x.remainder(), chunks_y.remainder(), 1);
    partial.iter().sum::<f32>() + tail
}

/// Reads one element past the end: Rust's bounds check panics.
fn off_by_one(x: &[f32], y: &[f32], _: usize) -> f32 {
    let mut sum = 0.0;
    for i in 0..=x.len() {
        sum += x[i] * y[i];
    }
    sum
}

/// Dies as a kernel with a memory error does: the whole process goes.
fn aborts(_: &[f32], _: &[f32], _: usize) -> f32 {
    std::process::abort()
}

/// Never returns.
fn spins(_: &[f32], _: &[f32], _: usize) -> f32 {
    loop {
        std::hint::spin_loop();
    }
}

/// Fast and wrong: forgets the last 1 % of the elements.
fn drops_tail(x: &[f32], y: &[f32], unroll: usize) -> f32 {
    let n = x.len() - x.len() / 100;
    accumulators(&x[..n], &y[..n], unroll)
}
