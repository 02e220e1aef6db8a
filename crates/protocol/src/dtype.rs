//! The element types of tensors.

use serde::{Deserialize, Serialize};

/// Element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    /// 32-bit float (`float`).
    F32,
    /// 64-bit float (`double`).
    F64,
    /// 32-bit signed integer (`int32_t`).
    I32,
    /// 64-bit signed integer (`int64_t`).
    I64,
    /// Unsigned byte (`uint8_t`).
    U8,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 5] = [DType::F32, DType::F64, DType::I32, DType::I64, DType::U8];

    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::U8 => 1,
        }
    }

    /// The short name used in manifests: `f32`, `f64`, `i32`, `i64`, `u8`.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
        }
    }

    /// Parses a manifest name ([`DType::name`]).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }
}
