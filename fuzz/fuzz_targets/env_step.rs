//! Episodes of the environment on any bytes: the first eight choose the task
//! set, the task and the turn budget; the rest, split at byte 0xFF, are the
//! policy's messages. Every step must keep the properties of
//! `agentrl::fuzzing::check_step` (`agentrl::fuzzing::check_episode`).
#![no_main]
use agentrl::fuzzing::{check_episode, Pools};
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

static POOLS: LazyLock<Pools> = LazyLock::new(Pools::standard);

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let seed = u64::from_le_bytes(data[..8].try_into().expect("eight bytes"));
    let messages: Vec<String> = data[8..]
        .split(|&b| b == 0xFF)
        .take(16)
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .collect();
    if let Some(problem) = check_episode(&POOLS, seed, &messages) {
        panic!("{problem}");
    }
});
