//! Grading tests for the Chapter 12 exercises: `cargo test -p exercises ch12`.
//!
//! Each test is named after its exercise (`ex2_...` grades Exercise 12.2)
//! and checks hand-checked values, consequences of the statement on random
//! inputs, and agreement with the library (`agentrl::horizon`) on the repair
//! MDP and on gym episodes.

use super::*;
use agentrl::gym::{BugFixEnv, Gym, Info};
use agentrl::horizon::{degenerate, family_split, overlong_penalty as library_penalty, shape, Wanderer};
use agentrl::mdp::{repair_mdp, sample_episode, seeded_rng, Verifier};
use agentrl::policies::run_episode;
use agentrl::rollout::Played;

use crate::testkit::{assert_close, between, index_below, uniform};

// ---------------------------------------------------------------------------
// Exercise 12.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_hand_values() {
    assert_close("5 of 8 turns, ramp of 3", overlong_penalty(5, false, 8, 3), 0.0, 1e-12);
    assert_close("6 of 8 turns, ramp of 3", overlong_penalty(6, false, 8, 3), -1.0 / 3.0, 1e-12);
    assert_close("7 of 8 turns, ramp of 3", overlong_penalty(7, false, 8, 3), -2.0 / 3.0, 1e-12);
    assert_close("8 of 8 turns, submitted", overlong_penalty(8, false, 8, 3), -1.0, 1e-12);
    assert_close("truncated", overlong_penalty(8, true, 8, 3), -1.0, 1e-12);
    // Truncation is the floor whatever the length: an episode cut off (by a
    // token budget, say) before the ramp still scores -1.
    assert_close("truncated after 3 of 8 turns", overlong_penalty(3, true, 8, 3), -1.0, 1e-12);
    assert_close("truncated after 6 of 8 turns", overlong_penalty(6, true, 8, 3), -1.0, 1e-12);
    assert_close("1 turn", overlong_penalty(1, false, 8, 3), 0.0, 1e-12);
    assert_close("DAPO's numbers: 18,432 of 20,480 with a cache of 4,096", overlong_penalty(18_432, false, 20_480, 4_096), -0.5, 1e-12);
}

#[test]
fn ex1_is_a_ramp_and_matches_the_library() {
    for budget in 1..=12 {
        for cache in 1..=budget {
            let mut last = 0.0;
            for turns in 1..=budget {
                let p = overlong_penalty(turns, false, budget, cache);
                assert!(p <= last + 1e-12 && (-1.0 - 1e-12..=1e-12).contains(&p), "budget {budget}, cache {cache}, turns {turns}: {p}");
                assert_close("the library's penalty", p, library_penalty(turns, false, budget, cache), 1e-12);
                assert_close("truncated before the budget", overlong_penalty(turns, true, budget, cache), -1.0, 1e-12);
                last = p;
            }
            assert_close("at the budget", overlong_penalty(budget, false, budget, cache), -1.0, 1e-12);
            assert_close("truncated", overlong_penalty(budget, true, budget, cache), -1.0, 1e-12);
        }
    }
}

// ---------------------------------------------------------------------------
// Exercise 12.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_hand_value() {
    // r = (0, 1), Φ = (0.5, 1, ignored), γ = 0.5: (0 + 0.5·1 − 0.5) + 0.5·(1 + 0.5·0 − 1) = 0.
    assert_close("two turns", shaped_return(&[0.0, 1.0], &[0.5, 1.0, 9.0], 0.5), 0.0, 1e-12);
    assert_close("one turn, γ = 1", shaped_return(&[1.0], &[0.25, 7.0], 1.0), 0.75, 1e-12);
}

#[test]
fn ex2_telescopes_to_the_return_minus_the_first_potential() {
    let mut rng = seeded_rng(12);
    for _ in 0..500 {
        let turns = 1 + index_below(10, &mut rng);
        let gamma = between(0.5, 1.0, &mut rng);
        let rewards: Vec<f64> = (0..turns).map(|_| between(-1.0, 1.0, &mut rng)).collect();
        let potentials: Vec<f64> = (0..=turns).map(|_| between(-2.0, 2.0, &mut rng)).collect();
        let plain: f64 = rewards.iter().enumerate().map(|(t, r)| gamma.powi(t as i32) * r).sum();
        assert_close("shaped return", shaped_return(&rewards, &potentials, gamma), plain - potentials[0], 1e-9);
    }
}

#[test]
fn ex2_agrees_with_the_shaped_repair_mdp() {
    let mdp = repair_mdp(Verifier::Hidden);
    let gamma = 0.9;
    let phi = [0.2, 1.0, 0.7, 0.4, 5.0, 5.0, 5.0];
    let shaped = shape(&mdp, &phi, gamma);
    let mut rng = seeded_rng(3);
    let uniform_policy = mdp.uniform_policy();
    for _ in 0..200 {
        // The same random path through both MDPs: every outcome is deterministic here.
        let episode = sample_episode(&mdp, &uniform_policy, 0, 50, &mut rng);
        if !mdp.terminal[episode.last().map(|&(s, a, _)| mdp.outcomes[s][a][0].next).unwrap()] {
            continue;
        }
        let states: Vec<usize> = episode.iter().map(|&(s, _, _)| s).chain(std::iter::once(mdp.outcomes[episode.last().unwrap().0][episode.last().unwrap().1][0].next)).collect();
        let rewards: Vec<f64> = episode.iter().map(|&(_, _, r)| r).collect();
        let potentials: Vec<f64> = states.iter().map(|&s| phi[s]).collect();
        let library: f64 = episode.iter().enumerate().map(|(t, &(s, a, _))| gamma.powi(t as i32) * shaped.outcomes[s][a][0].reward).sum();
        assert_close("shaped return against the shaped MDP", shaped_return(&rewards, &potentials, gamma), library, 1e-9);
    }
}

// ---------------------------------------------------------------------------
// Exercise 12.3
// ---------------------------------------------------------------------------

#[test]
fn ex3_hand_cases() {
    assert!(repeated_call(&["<call> test </call>", "<call> test </call>"]));
    assert!(repeated_call(&["<call> read </call>", "<call>read</call>"]));
    assert!(repeated_call(&["<call> edit 2 </call>", "  <call> edit   2 </call> "]));
    assert!(!repeated_call(&["<call> edit 2 </call>", "<call> edit 3 </call>"]));
    assert!(!repeated_call(&["<call> undo </call>", "<call> undo </call>"]));
    assert!(!repeated_call(&["<call> submit </call>", "<call> submit </call>"]));
    assert!(!repeated_call(&["<call> test </call>", "<call> read </call>", "<call> test </call>"]));
    assert!(!repeated_call(&["<call> test", "<call> test"]));
    assert!(!repeated_call(&["<call> edit 1 2 </call>", "<call> edit 1 2 </call>"]));
    assert!(!repeated_call(&[]));
    assert!(!repeated_call(&["<call> test </call>"]));
}

/// A random action: mostly well-formed calls, some near misses.
fn random_action(rng: &mut agentrl::mdp::StdRng) -> String {
    let tools = ["read", "test", "edit", "undo", "submit"];
    let tool = tools[index_below(tools.len(), rng)];
    let arg = if tool == "edit" || uniform(rng) < 0.1 { format!(" {}", 1 + index_below(3, rng)) } else { String::new() };
    match index_below(10, rng) {
        0 => format!("<call> {tool}{arg}"),
        1 => format!("<call>{tool}{arg}</call>"),
        2 => format!("<call> {tool}{arg} x </call>"),
        _ => format!("<call> {tool}{arg} </call>"),
    }
}

#[test]
fn ex3_matches_the_library_on_random_and_played_episodes() {
    let mut rng = seeded_rng(12);
    let check = |actions: Vec<String>| {
        let played = Played { task: 0, segments: vec![], actions: actions.clone(), reward: 0.0, info: Info::default(), parse_errors: 0 };
        let refs: Vec<&str> = actions.iter().map(String::as_str).collect();
        assert_eq!(repeated_call(&refs), degenerate(&played).repeated, "{actions:?}");
    };
    for _ in 0..2000 {
        let n = index_below(7, &mut rng);
        check((0..n).map(|_| random_action(&mut rng)).collect());
    }
    let split = family_split(&Gym::standard());
    let mut env = BugFixEnv::new(split.held_out_families.clone(), 8);
    let mut policy = Wanderer::new(5);
    for task in 0..env.tasks().len() {
        for _ in 0..10 {
            let mut transcript = Vec::new();
            run_episode(&mut env, task, &mut policy, Some(&mut transcript));
            check(transcript.iter().filter(|(o, _)| *o == agentrl::episode::Owner::Policy).map(|(_, m)| m.clone()).collect());
        }
    }
}
