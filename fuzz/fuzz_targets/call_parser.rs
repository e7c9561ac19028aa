//! The call parser on any bytes: every message either holds no call or parses
//! into words that parse back (`agentrl::fuzzing::check_message`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let message = String::from_utf8_lossy(data);
    if let Err(problem) = agentrl::fuzzing::check_message(&message) {
        panic!("{problem}");
    }
});
