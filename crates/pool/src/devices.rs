//! Which workers a pool starts.

use tunebox_process::{DeviceToken, VisibleDevices, visible_devices_from_env};

use crate::PoolError;

/// The devices of a pool: one worker per device, as Inductor's `TuningProcessPool`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    /// One worker per GPU of the parent's `CUDA_VISIBLE_DEVICES`, each pinned to one of the
    /// parent's tokens, verbatim and in the parent's order (parent `3,1` → workers `3` and `1`).
    Visible,
    /// One worker for each of the first `n` visible GPUs.
    FirstVisible(usize),
    /// One worker per token, each pinned to it (`CUDA_VISIBLE_DEVICES=<token>`).
    List(Vec<DeviceToken>),
    /// `n` workers not pinned to any device (CPU kernels).
    Cpu(usize),
}

impl Devices {
    /// The device of each worker (`None`: not pinned), reading the parent's
    /// `CUDA_VISIBLE_DEVICES` for the `Visible` kinds.
    ///
    /// # Errors
    ///
    /// [`PoolError::NoWorkers`], [`PoolError::NoDevices`], [`PoolError::NotEnoughDevices`],
    /// [`PoolError::DeviceCountUnknown`] when `CUDA_VISIBLE_DEVICES` is unset (a pool then counts
    /// the GPUs through a probe worker).
    pub fn resolve(&self) -> Result<Vec<Option<DeviceToken>>, PoolError> {
        self.resolve_with(visible_devices_from_env())
    }

    pub(crate) fn resolve_with(
        &self,
        visible: VisibleDevices,
    ) -> Result<Vec<Option<DeviceToken>>, PoolError> {
        let visible_list = || match &visible {
            VisibleDevices::All => Err(PoolError::DeviceCountUnknown {
                reason: "CUDA_VISIBLE_DEVICES is unset".into(),
            }),
            VisibleDevices::List(tokens) if tokens.is_empty() => Err(PoolError::NoDevices),
            VisibleDevices::List(tokens) => Ok(tokens.clone()),
        };
        let slots: Vec<Option<DeviceToken>> = match self {
            Devices::Visible => visible_list()?.into_iter().map(Some).collect(),
            Devices::FirstVisible(n) => {
                let tokens = visible_list()?;
                if *n > tokens.len() {
                    return Err(PoolError::NotEnoughDevices {
                        requested: *n,
                        visible: tokens.len(),
                    });
                }
                tokens.into_iter().take(*n).map(Some).collect()
            }
            Devices::List(tokens) => tokens.iter().cloned().map(Some).collect(),
            Devices::Cpu(n) => vec![None; *n],
        };
        if slots.is_empty() {
            return Err(PoolError::NoWorkers { requested: 0 });
        }
        Ok(slots)
    }
}

#[cfg(test)]
mod tests {
    use tunebox_process::parse_visible_devices;

    use super::*;

    fn tokens(slots: Vec<Option<DeviceToken>>) -> Vec<String> {
        slots
            .into_iter()
            .map(|t| t.map_or("-".into(), |t| t.to_string()))
            .collect()
    }

    #[test]
    fn visible_devices_keep_the_parents_tokens_and_order() {
        let parent = parse_visible_devices(Some("3,1"));
        assert_eq!(
            tokens(Devices::Visible.resolve_with(parent.clone()).unwrap()),
            ["3", "1"]
        );
        assert_eq!(
            tokens(
                Devices::FirstVisible(1)
                    .resolve_with(parent.clone())
                    .unwrap()
            ),
            ["3"]
        );
        assert!(matches!(
            Devices::FirstVisible(3).resolve_with(parent),
            Err(PoolError::NotEnoughDevices {
                requested: 3,
                visible: 2
            })
        ));
    }

    #[test]
    fn empty_and_unset_masks() {
        assert!(matches!(
            Devices::Visible.resolve_with(parse_visible_devices(Some(" "))),
            Err(PoolError::NoDevices)
        ));
        assert!(matches!(
            Devices::Visible.resolve_with(parse_visible_devices(None)),
            Err(PoolError::DeviceCountUnknown { .. })
        ));
        // CPU pools ignore the mask.
        assert_eq!(
            tokens(
                Devices::Cpu(2)
                    .resolve_with(parse_visible_devices(Some("")))
                    .unwrap()
            ),
            ["-", "-"]
        );
        assert!(matches!(
            Devices::Cpu(0).resolve_with(VisibleDevices::All),
            Err(PoolError::NoWorkers { requested: 0 })
        ));
        assert_eq!(
            tokens(
                Devices::List(vec!["A".into(), "B".into()])
                    .resolve_with(VisibleDevices::All)
                    .unwrap()
            ),
            ["A", "B"]
        );
    }
}
