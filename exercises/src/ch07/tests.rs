//! Grading tests for the Chapter 7 exercises: `cargo test -p exercises ch07`.
//!
//! Each test is named after its exercise (`ex3_...` grades Exercise 7.3) and
//! checks consequences of the exercise's statement, computed here from the
//! `agentrl` library (the exact bandit gradient, the library's baseline
//! estimator, group advantages, TD errors and GAE, exact policy values on the
//! repair MDP), not values copied from one particular solution.

use super::*;
use agentrl::advantage::{gae, group_advantages, reinforce_gradient_with_baseline, td0_critic, td_errors, GroupBaseline};
use agentrl::bandit::softmax;
use agentrl::mdp::{discounted_return, evaluate_policy, repair_mdp, sample_action, seeded_rng, Verifier, BUGGY};
use agentrl::pg::exact_gradient;

use crate::testkit::{assert_close, between};

// ---------------------------------------------------------------------------
// Exercise 7.1
// ---------------------------------------------------------------------------

/// Bandits to test at: (logits, success probabilities).
fn bandits() -> Vec<(Vec<f64>, Vec<f64>)> {
    vec![
        (vec![0.0, 0.0, 0.0], vec![0.9, 0.2, 0.5]),
        (vec![0.5, -0.2, 0.1, 0.0], vec![0.9, 0.2, 0.5, 0.1]),
        (vec![2.5, -1.0, 0.3, 0.3, -3.5], vec![0.95, 0.1, 0.6, 0.0, 1.0]),
        (vec![-0.7, 1.9], vec![0.3, 0.8]),
        (vec![3.0, 0.0, 0.0, 0.0], vec![0.9, 0.1, 0.1, 0.1]),
    ]
}

/// The exact trace of the covariance of $(R - b)(e_a - \pi)$ for one draw,
/// enumerated over the arms and the two rewards: $\mathbb{E}\lVert X \rVert^2 - \lVert \nabla J \rVert^2$.
fn exact_variance(theta: &[f64], p: &[f64], b: f64) -> f64 {
    let pi = softmax(theta);
    let mut second_moment = 0.0;
    for a in 0..pi.len() {
        let score_sq: f64 = (0..pi.len()).map(|c| (f64::from(a == c) - pi[c]).powi(2)).sum();
        for (r, prob) in [(1.0, p[a]), (0.0, 1.0 - p[a])] {
            second_moment += pi[a] * prob * (r - b).powi(2) * score_sq;
        }
    }
    second_moment - exact_gradient(theta, p).iter().map(|g| g * g).sum::<f64>()
}

fn mean_reward(theta: &[f64], p: &[f64]) -> f64 {
    softmax(theta).iter().zip(p).map(|(x, y)| x * y).sum()
}

#[test]
fn ex1_minimises_the_exact_variance() {
    for (theta, p) in bandits() {
        let b = optimal_constant_baseline(&theta, &p);
        let at_best = exact_variance(&theta, &p, b);
        for h in [0.5, 0.1, 0.01] {
            assert!(at_best < exact_variance(&theta, &p, b + h), "variance at b* = {b} should be below b* + {h} ({theta:?}, {p:?})");
            assert!(at_best < exact_variance(&theta, &p, b - h), "variance at b* = {b} should be below b* - {h} ({theta:?}, {p:?})");
            // The variance is a parabola in b: it is symmetric about its minimum, and only about its minimum.
            let (up, down) = (exact_variance(&theta, &p, b + h), exact_variance(&theta, &p, b - h));
            assert_close(&format!("variance at b* + {h} vs b* - {h} ({theta:?}, {p:?})"), up, down, 1e-10);
        }
        let j = mean_reward(&theta, &p);
        assert!(at_best <= exact_variance(&theta, &p, j) + 1e-15, "b* = {b} should do at least as well as b = J = {j}");
        let (lo, hi) = p.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        assert!(lo - 1e-12 <= b && b <= hi + 1e-12, "b* = {b} is a weighted average of the p's, in [{lo}, {hi}]");
    }
}

#[test]
fn ex1_differs_from_the_mean_reward_and_does_better() {
    // A policy sure of a good arm: the draws of the rare bad arms have large scores, so b* leans towards their rewards.
    let (theta, p) = (vec![3.0, 0.0, 0.0, 0.0], vec![0.9, 0.1, 0.1, 0.1]);
    let b = optimal_constant_baseline(&theta, &p);
    let j = mean_reward(&theta, &p);
    assert!(b < j - 0.2, "b* = {b} should lie well below J = {j} here");
    assert!(exact_variance(&theta, &p, b) < 0.8 * exact_variance(&theta, &p, j), "b* should cut the variance of b = J by over 20%");
}

#[test]
fn ex1_wins_on_sampled_single_draw_estimates() {
    let (theta, p) = (vec![3.0, 0.0, 0.0, 0.0], vec![0.9, 0.1, 0.1, 0.1]);
    let b = optimal_constant_baseline(&theta, &p);
    let j = mean_reward(&theta, &p);
    let exact = exact_gradient(&theta, &p);
    // The same seed for every baseline: the same arms and rewards, only b differs.
    let mse = |baseline: f64| {
        let mut rng = seeded_rng(11);
        let reps = 4000;
        (0..reps)
            .map(|_| reinforce_gradient_with_baseline(&theta, &p, 1, baseline, &mut rng).iter().zip(&exact).map(|(x, y)| (x - y).powi(2)).sum::<f64>())
            .sum::<f64>()
            / reps as f64
    };
    let at_best = mse(b);
    for other in [j, b + 0.15, b - 0.15, 0.0] {
        assert!(at_best < mse(other), "sampled error at b* = {b} ({at_best}) should be below that at b = {other} ({})", mse(other));
    }
}

#[test]
fn ex1_equal_arms_give_their_common_reward() {
    for (theta, _) in bandits() {
        for c in [0.0, 0.3, 1.0] {
            let p = vec![c; theta.len()];
            assert_close(&format!("b* with every arm paying {c} at {theta:?}"), optimal_constant_baseline(&theta, &p), c, 1e-12);
        }
        // Certain rewards and the right baseline: every estimate is exactly the (zero) gradient.
        let p = vec![1.0; theta.len()];
        assert_close(&format!("variance at b* with certain rewards at {theta:?}"), exact_variance(&theta, &p, optimal_constant_baseline(&theta, &p)), 0.0, 1e-12);
    }
}

// ---------------------------------------------------------------------------
// Exercise 7.2
// ---------------------------------------------------------------------------

/// Groups of every size from 1 to 9, some with 0/1 rewards, some with real ones.
fn reward_groups(seed: u64) -> Vec<Vec<f64>> {
    let mut rng = seeded_rng(seed);
    let mut groups = Vec::new();
    for g in 1..=9 {
        groups.push((0..g).map(|_| sample_action(&[0.4, 0.6], &mut rng) as f64).collect());
        groups.push((0..g).map(|_| between(-2.0, 3.0, &mut rng)).collect());
    }
    groups.push(vec![1.0; 6]);
    groups.push(vec![0.0, 0.0, 0.0, 1.0]);
    groups
}

#[test]
fn ex2_matches_the_library_leave_one_out() {
    for rewards in reward_groups(1) {
        let got = rloo_from_mean(&group_advantages(&rewards, GroupBaseline::Mean));
        let want = group_advantages(&rewards, GroupBaseline::LeaveOneOut);
        assert_eq!(got.len(), rewards.len(), "one advantage per episode of {rewards:?}");
        for i in 0..rewards.len() {
            assert_close(&format!("leave-one-out advantage {i} of {rewards:?}"), got[i], want[i], 1e-12);
        }
    }
    assert!(rloo_from_mean(&[]).is_empty(), "an empty group has no advantages");
}

#[test]
fn ex2_the_baseline_does_not_see_the_episodes_own_reward() {
    for rewards in reward_groups(2).into_iter().filter(|r| r.len() >= 2) {
        let base = rloo_from_mean(&group_advantages(&rewards, GroupBaseline::Mean));
        for i in 0..rewards.len() {
            let mut changed = rewards.clone();
            changed[i] += 1.7;
            let moved = rloo_from_mean(&group_advantages(&changed, GroupBaseline::Mean));
            // A_i − R_i is minus episode i's baseline, which must not move when R_i does.
            assert_close(&format!("baseline of episode {i} of {rewards:?} after changing R_{i}"), moved[i] - changed[i], base[i] - rewards[i], 1e-12);
        }
    }
}

// ---------------------------------------------------------------------------
// Exercises 7.3 and 7.4: episodes with values
// ---------------------------------------------------------------------------

/// (rewards, values) of length T and T + 1: arbitrary numbers, the last value nonzero (a cut-off episode) or 0.
fn random_episodes(seed: u64) -> Vec<(Vec<f64>, Vec<f64>)> {
    let mut rng = seeded_rng(seed);
    (0..40)
        .map(|i| {
            let t = i % 13;
            let rewards: Vec<f64> = (0..t).map(|_| between(-1.0, 2.0, &mut rng)).collect();
            let mut values: Vec<f64> = (0..=t).map(|_| between(-1.0, 1.5, &mut rng)).collect();
            if i % 2 == 0 {
                values[t] = 0.0;
            }
            (rewards, values)
        })
        .collect()
}

/// Episodes of the uniform policy on the repair MDP from `buggy`, at most `cap` steps, valued by a rough
/// TD(0) critic (0 at terminal states, the critic's value where an episode was cut off).
fn repair_episodes(seed: u64, cap: usize, count: usize) -> Vec<(Vec<f64>, Vec<f64>)> {
    let mdp = repair_mdp(Verifier::Hidden);
    let policy = mdp.uniform_policy();
    let mut rng = seeded_rng(seed);
    let critic = td0_critic(&mdp, &policy, BUGGY, 0.9, 0.05, 200, &mut rng);
    (0..count)
        .map(|_| {
            let (mut s, mut states, mut rewards) = (BUGGY, vec![BUGGY], Vec::new());
            while !mdp.terminal[s] && rewards.len() < cap {
                let (next, r) = mdp.step(s, sample_action(&policy[s], &mut rng), &mut rng);
                rewards.push(r);
                states.push(next);
                s = next;
            }
            (rewards, states.iter().map(|&s| if mdp.terminal[s] { 0.0 } else { critic[s] }).collect())
        })
        .collect()
}

fn all_episodes() -> Vec<(Vec<f64>, Vec<f64>)> {
    [random_episodes(5), repair_episodes(6, 4, 30), repair_episodes(7, 50, 30)].concat()
}

const GAMMAS: [f64; 4] = [1.0, 0.99, 0.9, 0.5];
const LAMBDAS: [f64; 5] = [0.0, 0.5, 0.9, 0.95, 1.0];

/// The bootstrapped Monte Carlo return from every t: the rewards, then γ^{T−t} V(s_T).
fn monte_carlo(rewards: &[f64], values: &[f64], gamma: f64) -> Vec<f64> {
    let t_end = rewards.len();
    (0..t_end).map(|t| discounted_return(&rewards[t..], gamma) + gamma.powi((t_end - t) as i32) * values[t_end]).collect()
}

// ---------------------------------------------------------------------------
// Exercise 7.3
// ---------------------------------------------------------------------------

#[test]
fn ex3_equals_the_recursive_gae() {
    for (rewards, values) in all_episodes() {
        for gamma in GAMMAS {
            for lambda in LAMBDAS {
                let got = gae_by_sum(&rewards, &values, gamma, lambda);
                let want = gae(&rewards, &values, gamma, lambda);
                assert_eq!(got.len(), rewards.len(), "one advantage per step");
                for t in 0..rewards.len() {
                    assert_close(&format!("A_{t} with gamma = {gamma}, lambda = {lambda}, rewards {rewards:?}, values {values:?}"), got[t], want[t], 1e-10);
                }
            }
        }
    }
}

#[test]
fn ex3_ends_are_td_errors_and_monte_carlo() {
    for (rewards, values) in all_episodes() {
        for gamma in GAMMAS {
            let td = td_errors(&rewards, &values, gamma);
            let zero = gae_by_sum(&rewards, &values, gamma, 0.0);
            let one = gae_by_sum(&rewards, &values, gamma, 1.0);
            let mc = monte_carlo(&rewards, &values, gamma);
            for t in 0..rewards.len() {
                assert_close(&format!("lambda = 0: A_{t} is the TD error (gamma = {gamma})"), zero[t], td[t], 1e-12);
                assert_close(&format!("lambda = 1: A_{t} is G_t - V(s_t) (gamma = {gamma})"), one[t], mc[t] - values[t], 1e-10);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Exercise 7.4
// ---------------------------------------------------------------------------

#[test]
fn ex4_minus_the_value_is_gae() {
    for (rewards, values) in all_episodes() {
        for gamma in GAMMAS {
            for lambda in LAMBDAS {
                let got = lambda_return(&rewards, &values, gamma, lambda);
                let want = gae(&rewards, &values, gamma, lambda);
                assert_eq!(got.len(), rewards.len(), "one lambda-return per step");
                for t in 0..rewards.len() {
                    assert_close(&format!("G^lambda_{t} - V(s_{t}) with gamma = {gamma}, lambda = {lambda}, rewards {rewards:?}, values {values:?}"), got[t] - values[t], want[t], 1e-10);
                }
            }
        }
    }
}

#[test]
fn ex4_ends_are_the_one_step_target_and_the_monte_carlo_return() {
    for (rewards, values) in all_episodes() {
        for gamma in GAMMAS {
            let zero = lambda_return(&rewards, &values, gamma, 0.0);
            let one = lambda_return(&rewards, &values, gamma, 1.0);
            let mc = monte_carlo(&rewards, &values, gamma);
            for t in 0..rewards.len() {
                assert_close(&format!("lambda = 0: G^0_{t} = r_t + gamma V(s_t+1) (gamma = {gamma})"), zero[t], rewards[t] + gamma * values[t + 1], 1e-12);
                assert_close(&format!("lambda = 1: G^1_{t} is the Monte Carlo return (gamma = {gamma})"), one[t], mc[t], 1e-10);
            }
        }
    }
}

#[test]
fn ex4_with_the_true_values_its_mean_is_the_value() {
    // With V the policy's exact value, every n-step return from s_0 has mean V(s_0), and so does any average of them.
    let mdp = repair_mdp(Verifier::Hidden);
    let policy = mdp.uniform_policy();
    let gamma = 0.9;
    let v = evaluate_policy(&mdp, &policy, gamma);
    let mut rng = seeded_rng(21);
    let episodes: Vec<(Vec<f64>, Vec<f64>)> = (0..6000)
        .map(|_| {
            let (mut s, mut values, mut rewards) = (BUGGY, vec![v[BUGGY]], Vec::new());
            while !mdp.terminal[s] && rewards.len() < 6 {
                let (next, r) = mdp.step(s, sample_action(&policy[s], &mut rng), &mut rng);
                rewards.push(r);
                values.push(if mdp.terminal[next] { 0.0 } else { v[next] });
                s = next;
            }
            (rewards, values)
        })
        .collect();
    for lambda in [0.0, 0.5, 0.9, 1.0] {
        let xs: Vec<f64> = episodes.iter().map(|(r, vals)| lambda_return(r, vals, gamma, lambda)[0]).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let se = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (xs.len() - 1) as f64 / xs.len() as f64).sqrt();
        assert_close(&format!("mean of G^lambda_0 over episodes from buggy, lambda = {lambda}"), mean, v[BUGGY], 5.0 * se + 1e-9);
    }
}

// ---------------------------------------------------------------------------
// Exercise 7.5
// ---------------------------------------------------------------------------

/// Every advantage of the group is zero under `baseline` (to rounding).
fn no_signal(rewards: &[f64], baseline: GroupBaseline) -> bool {
    group_advantages(rewards, baseline).iter().all(|a| a.abs() < 1e-9)
}

#[test]
fn ex5_exactly_the_groups_that_get_no_advantage() {
    let mut rng = seeded_rng(31);
    let mut batches: Vec<(Vec<f64>, usize)> = Vec::new();
    for (group, p) in [(1, 0.5), (2, 0.5), (4, 0.8), (8, 0.9), (5, 0.1)] {
        batches.push(((0..group * 12).map(|_| sample_action(&[1.0 - p, p], &mut rng) as f64).collect(), group));
    }
    // Real-valued rewards, with equal groups of values that are not exact in binary.
    batches.push((vec![0.1, 0.1, 0.1, 0.3, 0.3, 0.7, 0.7, 0.7, 0.2, 0.1, 0.1, 0.1], 3));
    batches.push((vec![0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1000001, 0.0, 0.0, 0.0, 0.0], 4));
    for (rewards, group) in batches {
        let got = zero_variance_groups(&rewards, group);
        assert!(got.windows(2).all(|w| w[0] < w[1]), "indices in increasing order, no repeats: {got:?}");
        for (i, chunk) in rewards.chunks(group).enumerate() {
            let listed = got.contains(&i);
            for baseline in [GroupBaseline::Mean, GroupBaseline::LeaveOneOut, GroupBaseline::MeanStd] {
                assert_eq!(listed, no_signal(chunk, baseline), "group {i} = {chunk:?} listed: {listed}, no advantage under {baseline:?}: {}", !listed);
            }
        }
        assert!(got.iter().all(|&i| i < rewards.len() / group), "every index is a group of the batch: {got:?}");
    }
}

#[test]
fn ex5_wasted_fraction_matches_the_probability_of_a_unanimous_group() {
    // With success probability p, a group of G is unanimous with probability p^G + (1 − p)^G.
    let mut rng = seeded_rng(32);
    for (group, p) in [(4, 0.8), (8, 0.5), (2, 0.3)] {
        let groups = 3000;
        let rewards: Vec<f64> = (0..group * groups).map(|_| sample_action(&[1.0 - p, p], &mut rng) as f64).collect();
        let frac = zero_variance_groups(&rewards, group).len() as f64 / groups as f64;
        let want = p.powi(group as i32) + (1.0 - p).powi(group as i32);
        let se = (want * (1.0 - want) / groups as f64).sqrt();
        assert_close(&format!("fraction of unanimous groups of {group} at p = {p}"), frac, want, 5.0 * se);
    }
}
