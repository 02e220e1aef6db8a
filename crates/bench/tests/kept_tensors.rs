//! A large tensor's pages serve the next tensor of its size (`HostTensor::allocate`), filled
//! as a fresh one would be. A test binary of its own: the kept mappings are the process's, and
//! mapping, zeroing and unmapping 64-128 MiB beside the crate's timing tests disturbs them.

use tunebox_bench::HostTensor;
use tunebox_protocol::{DType, Init, TensorSpec};

/// f32 elements past the size from which tensors' pages are kept (64 MiB).
const N: u64 = (64 << 20) / 4 + 1024;

fn spec(n: u64, init: Init) -> TensorSpec {
    TensorSpec::new("t", DType::F32, vec![n]).init(init)
}

/// Whether the page holding `at` is mapped in this process (`mincore` fails with `ENOMEM` on
/// an address that is not).
fn mapped(at: *const u8) -> bool {
    let page = (at as usize) & !4095;
    let mut resident = 0u8;
    // SAFETY: `mincore` only reports on the range; `resident` has room for its one page.
    unsafe { libc::mincore(page as *mut libc::c_void, 4096, &mut resident) == 0 }
}

#[test]
fn a_large_tensors_pages_serve_the_next_of_its_size_with_its_own_init() {
    let mut first = HostTensor::allocate(&spec(N, Init::Zeros)).unwrap();
    first.bytes_mut().fill(0xAB);
    let at = first.bytes().as_ptr();
    drop(first);
    assert!(mapped(at), "kept, not unmapped");
    let mut again = HostTensor::allocate(&spec(N, Init::Zeros)).unwrap();
    assert_eq!(again.bytes().as_ptr(), at, "the kept mapping");
    assert!(
        again.bytes().iter().all(|&b| b == 0),
        "zeroed, as fresh pages"
    );
    again.check_bounds().unwrap();
    again.bytes_mut().fill(0xCD);
    drop(again);
    let random = HostTensor::allocate(&spec(N, Init::Random { seed: 5 })).unwrap();
    assert_eq!(random.bytes().as_ptr(), at);
    assert!(random.is_pristine(), "filled as a fresh one is");
    drop(random);

    // Another size: a mapping of its own, fresh, kept in turn.
    let mut other = HostTensor::allocate(&spec(2 * N, Init::Ones)).unwrap();
    let other_at = other.bytes().as_ptr();
    assert!(other.is_pristine());
    other.bytes_mut().fill(0);
    drop(other);
    // A huge-page tensor under 64 MiB is not kept, and does not take the kept one or drop it.
    let small = HostTensor::allocate(&spec(1 << 20, Init::Zeros)).unwrap();
    let small_at = small.bytes().as_ptr();
    drop(small);
    assert!(!mapped(small_at));
    assert!(mapped(other_at));
    let ones = HostTensor::allocate(&spec(2 * N, Init::Ones)).unwrap();
    assert_eq!(ones.bytes().as_ptr(), other_at);
    assert!(ones.is_pristine(), "ones again, not the zeros left in it");
}
