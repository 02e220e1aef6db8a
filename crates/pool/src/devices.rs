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
    /// One worker per token, each pinned to it (`CUDA_VISIBLE_DEVICES=<token>`). Each token
    /// must appear once ([`PoolError::RepeatedDevice`] otherwise).
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
    /// [`PoolError::RepeatedDevice`] (a device named twice: an error, not deduplicated),
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
            VisibleDevices::Repeated(token) => Err(PoolError::RepeatedDevice {
                token: token.to_string(),
                place: "CUDA_VISIBLE_DEVICES",
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
            Devices::List(tokens) => {
                for (i, token) in tokens.iter().enumerate() {
                    if tokens[..i].contains(token) {
                        return Err(PoolError::RepeatedDevice {
                            token: token.to_string(),
                            place: "Devices::List",
                        });
                    }
                }
                tokens.iter().cloned().map(Some).collect()
            }
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
    fn a_repeated_device_is_an_error_that_names_it() {
        for (devices, mask) in [
            (Devices::Visible, "0,1,0"),
            (Devices::FirstVisible(1), "0,0"),
        ] {
            let err = devices
                .resolve_with(parse_visible_devices(Some(mask)))
                .unwrap_err();
            assert!(
                matches!(&err, PoolError::RepeatedDevice { token, place: "CUDA_VISIBLE_DEVICES" } if token == "0"),
                "{err:?}"
            );
            assert!(err.to_string().contains("device 0 is named twice"), "{err}");
        }
        let err = Devices::List(vec!["1".into(), "0".into(), "1".into()])
            .resolve_with(VisibleDevices::All)
            .unwrap_err();
        assert!(
            matches!(&err, PoolError::RepeatedDevice { token, place: "Devices::List" } if token == "1"),
            "{err:?}"
        );
        // The legacy MIG form is a device like any other.
        let mig = "MIG-GPU-5ec1b5d2-1b8e-4f6c-9a1d-2b8f0c3e7a41/1/0";
        assert_eq!(
            tokens(
                Devices::Visible
                    .resolve_with(parse_visible_devices(Some(mig)))
                    .unwrap()
            ),
            [mig]
        );
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
