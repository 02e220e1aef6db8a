//! Checking a launch configuration against the device's and the kernel's limits before
//! launching, so that a bad one is a clear [`BenchError::InvalidLaunch`] (and the worker lives)
//! instead of the driver's bare `CUDA_ERROR_INVALID_VALUE`.

use tunebox_protocol::{Arg, BenchError, LaunchConfig, ScalarKind};

use crate::DeviceLimits;

/// What one compiled kernel allows, from its function attributes (`cuFuncGetAttribute`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionLimits {
    /// Most threads per block this kernel can be launched with: the device's limit, lowered by
    /// the registers each thread uses and by `__launch_bounds__`
    /// (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`).
    pub max_threads_per_block: u32,
    /// Registers per thread (`CU_FUNC_ATTRIBUTE_NUM_REGS`).
    pub registers_per_thread: u32,
    /// Statically allocated shared memory in bytes (`CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`).
    pub static_shared_bytes: u32,
    /// Dynamic shared memory the kernel may currently be launched with, in bytes
    /// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`; 48 KiB minus the static part until a
    /// launch opts in to more).
    pub max_dynamic_shared_bytes: u32,
}

/// What must be done before a valid launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchPlan {
    /// Raise the kernel's `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` to this many bytes
    /// first (the opt-in for more than 48 KiB of shared memory per block).
    pub opt_in_dynamic_shared_bytes: Option<u32>,
}

/// Checks `launch` of kernel `entry` against `device` and `function` limits, in this order:
/// every dimension at least 1; block dimensions; threads per block (device); grid dimensions;
/// shared memory (static + dynamic, against the default and the opt-in maximum); threads per
/// block for this kernel (registers, `__launch_bounds__`).
///
/// # Errors
///
/// [`BenchError::InvalidLaunch`] naming the first violated limit with the requested and allowed
/// values.
pub fn validate_launch(
    launch: &LaunchConfig,
    entry: &str,
    device: &DeviceLimits,
    function: &FunctionLimits,
) -> Result<LaunchPlan, BenchError> {
    let invalid = |detail: String| Err(BenchError::InvalidLaunch { detail });
    const AXES: [&str; 3] = ["x", "y", "z"];
    for (what, dims) in [("grid", launch.grid), ("block", launch.block)] {
        if let Some(axis) = dims.iter().position(|&d| d == 0) {
            return invalid(format!(
                "{what}.{} is 0: every grid and block dimension must be at least 1 (grid {:?}, \
                 block {:?})",
                AXES[axis], launch.grid, launch.block
            ));
        }
    }
    for ((axis, &requested), &allowed) in AXES.iter().zip(&launch.block).zip(&device.max_block_dim)
    {
        if requested > allowed {
            return invalid(format!(
                "block.{axis} = {requested} exceeds the device's maximum block dimension \
                 {axis} (requested {requested}, allowed {allowed})"
            ));
        }
    }
    let threads: u64 = launch.block.iter().map(|&d| u64::from(d)).product();
    let device_threads = u64::from(device.max_threads_per_block);
    if threads > device_threads {
        return invalid(format!(
            "the block has {threads} threads ({} x {} x {}), more than the device's maximum \
             threads per block (requested {threads}, allowed {device_threads})",
            launch.block[0], launch.block[1], launch.block[2]
        ));
    }
    for ((axis, &requested), &allowed) in AXES.iter().zip(&launch.grid).zip(&device.max_grid_dim) {
        if requested > allowed {
            return invalid(format!(
                "grid.{axis} = {requested} exceeds the device's maximum grid dimension {axis} \
                 (requested {requested}, allowed {allowed})"
            ));
        }
    }
    let static_shared = u64::from(function.static_shared_bytes);
    let dynamic_shared = u64::from(launch.shared_mem_bytes);
    let shared = static_shared + dynamic_shared;
    let optin = u64::from(
        device
            .max_shared_per_block_optin
            .max(device.max_shared_per_block),
    );
    if shared > optin {
        return invalid(format!(
            "shared memory per block: {static_shared} bytes static + {dynamic_shared} bytes \
             dynamic = {shared} bytes, more than the device's maximum shared memory per block \
             with opt-in (requested {shared}, allowed {optin})"
        ));
    }
    let function_threads = u64::from(function.max_threads_per_block);
    if threads > function_threads {
        return invalid(format!(
            "kernel `{entry}` can run at most {function_threads} threads per block (it uses {} \
             registers per thread, the device has {} registers per block, and \
             `__launch_bounds__` may lower it further); the block has {threads} threads \
             (requested {threads}, allowed {function_threads})",
            function.registers_per_thread, device.max_registers_per_block
        ));
    }
    let opt_in = (launch.shared_mem_bytes > function.max_dynamic_shared_bytes)
        .then_some(launch.shared_mem_bytes);
    Ok(LaunchPlan {
        opt_in_dynamic_shared_bytes: opt_in,
    })
}

/// Checks the kernel's parameter sizes (from `cuFuncGetParamInfo`) against the request's
/// arguments in their `order`: an 8-byte pointer per tensor; per scalar of `scalars` (their kinds),
/// a parameter of exactly its size for a float (`float` 4 bytes, `double` 8: read at another
/// width it is another number), and of at most 8 bytes for an integer (its slot holds the value
/// sign-extended to 64 bits, so a 4-byte `int` reads an `i32` scalar, or the low half of an
/// `i64` one, as before scalar kinds).
///
/// # Errors
///
/// [`BenchError::InvalidRequest`] naming the mismatch: launching anyway would make the driver
/// read parameters that were never passed.
pub(crate) fn check_parameters(
    entry: &str,
    sizes: &[usize],
    order: &[Arg],
    scalars: &[ScalarKind],
) -> Result<(), BenchError> {
    let invalid = |detail: String| Err(BenchError::InvalidRequest { detail });
    if sizes.len() != order.len() {
        let tensors = order
            .iter()
            .filter(|a| !matches!(a, Arg::Scalar(_)))
            .count();
        return invalid(format!(
            "kernel `{entry}` takes {} parameters, but the request passes {tensors} tensors and \
             {} scalars ({} arguments)",
            sizes.len(),
            order.len() - tensors,
            order.len()
        ));
    }
    for (i, (&size, arg)) in sizes.iter().zip(order).enumerate() {
        match *arg {
            Arg::Tensor(t) | Arg::Untyped(t) if size != 8 => {
                return invalid(format!(
                    "parameter {i} of kernel `{entry}` is {size} bytes, but tensor {t} is passed \
                     as a pointer (8 bytes)"
                ));
            }
            Arg::Scalar(s) => {
                let kind = scalars[s as usize];
                let fits = if kind.is_float() {
                    size == kind.size_bytes()
                } else {
                    size <= 8
                };
                if !fits {
                    let what = match kind {
                        ScalarKind::I32 | ScalarKind::I64 => "a 64-bit integer (8 bytes)",
                        ScalarKind::F32 => "a float (4 bytes)",
                        ScalarKind::F64 => "a double (8 bytes)",
                    };
                    return invalid(format!(
                        "parameter {i} of kernel `{entry}` is {size} bytes, but scalar {s} is \
                         passed as {what}"
                    ));
                }
            }
            Arg::Tensor(_) | Arg::Untyped(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function() -> FunctionLimits {
        FunctionLimits {
            max_threads_per_block: 1024,
            registers_per_thread: 32,
            static_shared_bytes: 0,
            max_dynamic_shared_bytes: 48 * 1024,
        }
    }

    fn launch(grid: [u32; 3], block: [u32; 3], shared_mem_bytes: u32) -> LaunchConfig {
        LaunchConfig::new(grid, block).shared_mem_bytes(shared_mem_bytes)
    }

    fn detail(result: Result<LaunchPlan, BenchError>) -> String {
        match result {
            Err(BenchError::InvalidLaunch { detail }) => detail,
            other => panic!("not an invalid launch: {other:?}"),
        }
    }

    #[test]
    fn a_valid_launch_needs_nothing() {
        let plan = validate_launch(
            &launch([1024, 64, 1], [256, 4, 1], 1024),
            "k",
            &DeviceLimits::hopper(),
            &function(),
        )
        .unwrap();
        assert_eq!(plan.opt_in_dynamic_shared_bytes, None);
    }

    #[test]
    fn zero_dimensions() {
        let d = detail(validate_launch(
            &launch([1, 0, 1], [32, 1, 1], 0),
            "k",
            &DeviceLimits::hopper(),
            &function(),
        ));
        assert!(d.starts_with("grid.y is 0"), "{d}");
        let d = detail(validate_launch(
            &launch([1, 1, 1], [32, 1, 0], 0),
            "k",
            &DeviceLimits::hopper(),
            &function(),
        ));
        assert!(d.starts_with("block.z is 0"), "{d}");
    }

    #[test]
    fn block_limits() {
        let device = DeviceLimits::hopper();
        let d = detail(validate_launch(
            &launch([1, 1, 1], [1, 1, 128], 0),
            "k",
            &device,
            &function(),
        ));
        assert!(
            d.contains("block.z = 128") && d.contains("(requested 128, allowed 64)"),
            "{d}"
        );
        let d = detail(validate_launch(
            &launch([1, 1, 1], [1024, 2, 1], 0),
            "k",
            &device,
            &function(),
        ));
        assert!(
            d.contains("maximum threads per block (requested 2048, allowed 1024)"),
            "{d}"
        );
    }

    #[test]
    fn grid_limits() {
        let d = detail(validate_launch(
            &launch([1, 70_000, 1], [32, 1, 1], 0),
            "k",
            &DeviceLimits::hopper(),
            &function(),
        ));
        assert!(
            d.contains("grid.y = 70000") && d.contains("(requested 70000, allowed 65535)"),
            "{d}"
        );
        // x goes up to 2^31 - 1.
        validate_launch(
            &launch([i32::MAX as u32, 1, 1], [32, 1, 1], 0),
            "k",
            &DeviceLimits::hopper(),
            &function(),
        )
        .unwrap();
    }

    #[test]
    fn shared_memory_opt_in_and_limit() {
        let device = DeviceLimits::hopper();
        let mut f = function();
        f.static_shared_bytes = 16 * 1024;
        f.max_dynamic_shared_bytes = 32 * 1024;
        // Within the default: nothing to do.
        let plan = validate_launch(&launch([1, 1, 1], [32, 1, 1], 32 * 1024), "k", &device, &f);
        assert_eq!(plan.unwrap().opt_in_dynamic_shared_bytes, None);
        // Above the default, within the opt-in maximum: opt in.
        let plan = validate_launch(&launch([1, 1, 1], [32, 1, 1], 100_000), "k", &device, &f);
        assert_eq!(plan.unwrap().opt_in_dynamic_shared_bytes, Some(100_000));
        // Above the opt-in maximum: refused, counting the static part.
        let d = detail(validate_launch(
            &launch([1, 1, 1], [32, 1, 1], 220 * 1024),
            "k",
            &device,
            &f,
        ));
        assert!(
            d.contains("16384 bytes static + 225280 bytes dynamic = 241664 bytes")
                && d.contains("(requested 241664, allowed 232448)"),
            "{d}"
        );
    }

    #[test]
    fn register_limited_kernels() {
        let mut f = function();
        f.max_threads_per_block = 256;
        f.registers_per_thread = 255;
        let d = detail(validate_launch(
            &launch([1, 1, 1], [512, 1, 1], 0),
            "matmul",
            &DeviceLimits::hopper(),
            &f,
        ));
        assert!(
            d.contains("kernel `matmul` can run at most 256 threads per block")
                && d.contains("255 registers per thread")
                && d.contains("(requested 512, allowed 256)"),
            "{d}"
        );
    }

    #[test]
    fn the_first_violation_is_reported() {
        // Both the block and the grid are too large: the block is named.
        let d = detail(validate_launch(
            &launch([1, 1, 100_000], [2048, 1, 1], 0),
            "k",
            &DeviceLimits::hopper(),
            &function(),
        ));
        assert!(d.starts_with("block.x = 2048"), "{d}");
    }

    /// Every tensor, then `scalars` scalars of these kinds.
    fn default_order(tensors: u32, scalars: &[ScalarKind]) -> Vec<Arg> {
        (0..tensors)
            .map(Arg::Tensor)
            .chain((0..scalars.len() as u32).map(Arg::Scalar))
            .collect()
    }

    #[test]
    fn parameters_must_match_the_request() {
        let i64s = |n: usize| vec![ScalarKind::I64; n];
        let check = |sizes: &[usize], tensors: u32, scalars: &[ScalarKind]| {
            check_parameters("k", sizes, &default_order(tensors, scalars), scalars)
        };
        check(&[8, 8, 8, 4], 3, &i64s(1)).unwrap();
        check(&[8, 8], 2, &[]).unwrap();
        let err = check(&[8, 8, 8], 3, &i64s(1)).unwrap_err();
        assert!(
            err.to_string()
                .contains("takes 3 parameters, but the request passes 3 tensors and 1 scalars"),
            "{err}"
        );
        let err = check(&[8, 4], 2, &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("parameter 1 of kernel `k` is 4 bytes"),
            "{err}"
        );
        let err = check(&[8, 16], 1, &i64s(1)).unwrap_err();
        assert!(
            err.to_string().contains("scalar 0 is passed as a 64-bit"),
            "{err}"
        );
    }

    /// Kernel Tuner's `k(int n, float alpha, double beta, float *y)`: typed scalars first.
    #[test]
    fn typed_scalars_in_any_order() {
        let kinds = [ScalarKind::I32, ScalarKind::F32, ScalarKind::F64];
        let order = [
            Arg::Scalar(0),
            Arg::Scalar(1),
            Arg::Scalar(2),
            Arg::Tensor(0),
        ];
        check_parameters("k", &[4, 4, 8, 8], &order, &kinds).unwrap();
        // An `int` scalar fills a `long long` parameter too (its slot is sign-extended).
        check_parameters("k", &[8, 4, 8, 8], &order, &kinds).unwrap();
        let err = check_parameters("k", &[4, 8, 8, 8], &order, &kinds).unwrap_err();
        assert!(
            err.to_string().contains(
                "parameter 1 of kernel `k` is 8 bytes, but scalar 1 is passed as a float (4 bytes)"
            ),
            "{err}"
        );
        let err = check_parameters("k", &[4, 4, 4, 8], &order, &kinds).unwrap_err();
        assert!(
            err.to_string()
                .contains("scalar 2 is passed as a double (8 bytes)"),
            "{err}"
        );
        let err = check_parameters("k", &[4, 4, 8, 4], &order, &kinds).unwrap_err();
        assert!(
            err.to_string().contains(
                "parameter 3 of kernel `k` is 4 bytes, but tensor 0 is passed as a pointer"
            ),
            "{err}"
        );
    }
}
