//! `agentrl`: the code that *Agentic RL in Rust* derives, chapter by chapter.
//!
//! Each module names the chapter that introduces it and uses only modules of
//! earlier chapters (or of its own chapter); `cargo xtask test` checks it. The chapters show this code by
//! include, so what you read in the book is what runs here.
//!
//! | module | chapter | what it holds |
//! | --- | --- | --- |
//! | [`book`] | 0 | determinism settings and where figures go |
//! | [`sandbox`] | 1 | a limited Rhai engine and the test runner |
//! | [`clamp`] | 1 | the clamp task: issue, sources, tests, edit menu |
//! | [`episode`] | 1 | the call parser, the environment step, scripted and random episodes |
//! | [`plot`] | 1 | line charts for the book's data figures |
//! | [`diagrams`] | 1 | Figure 1.2, the agentic RL loop and the token strip |
//! | [`mdp`] | 2 | the repair MDP and its state diagram; policy evaluation, value and policy iteration, Monte Carlo, Q-learning |
//! | [`bandit`] | 2 | the k-armed bandit: xi-greedy, UCB, gradient bandit |
//! | [`pomdp`] | 2 | the hidden-family POMDP: beliefs and the value of `test` |
//! | [`stats`] | 2 | Monte Carlo error: standard errors, Student-t intervals over seeds, paired differences, Wilson intervals for rates, a paired bootstrap over tasks, bands for curves; named random streams |
//! | [`runner`] | 3 | the sandboxed test runners: time limit, output limits, compile cache, child processes under OS limits |
//! | [`gym`] | 3 | the BugFix gym: tasks as data, eight bug families, generation, the split, the environment |
//! | [`policies`] | 3 | scripted policies (oracle, hacker, random) and the episode loop |
//! | [`tokenizer`] | 4 | a byte-level BPE for the gym's text, special tokens, the chat format |
//! | [`tinyagent`] | 4 | TinyAgent: the transformer, log-probs, entropy, sampling, KV-cache generation |
//! | [`agent`] | 4 | the policy interface: contexts in, sampled actions with log-probs out |
//! | [`pretrain`] | 4 | the uninformed policy, pretraining on the gym's transcripts, the base model |
//! | [`rollout`] | 4 | playing gym episodes with a language-model policy, many at once, with sampled tokens and log-probs |
//! | [`trajectory`] | 5 | trajectories with action masks and sampling log-probs, padded batches, the masked loss |
//! | [`pg`] | 6 | REINFORCE: checked against the exact gradient, tabular, and for TinyAgent in the gym; the one training loop ([`pg::train`]) and the parts an algorithm supplies; runs side by side |
//! | [`advantage`] | 7 | baselines, group advantages (mean, leave-one-out, std), TD errors, GAE, a TD(0) critic, a value-head critic for the loop |
//! | [`ppo`] | 8 | importance ratios, the clipped surrogate, clip fraction and approximate KL, PPO as an algorithm of the loop |
//! | [`grpo`] | 9 | GRPO and its variants: loss normalisations, clip-higher, group filters, named configs, the regulariser hook |
//! | [`regularization`] | 10 | KL estimators k1/k2/k3 and their exact moments; a KL penalty towards a reference policy (reward or loss); an entropy bonus |
//! | [`reward`] | 11 | verifiers (hidden tests, public tests, partial credit, patch similarity), a learned judge, exploit monitors, training on any verifier ([`reward::Verified`]), a hack lab |
//! | [`horizon`] | 12 | edit menus as diffs under neutral labels with `undo`, files with several bugs, the held-out families, test-driven search, potential-based shaping, context growth, degenerate episodes |
//! | [`mutation`] | 12 | bug families at scale: written programs with public and hidden tests, 24 mutation operators, the mutants both suites catch, tasks whose candidates are diffs under neutral labels with distractors of the fixes' shapes, splits by instance, program and operator, and the baselines (chance, random-order search, lookup, oracle) |
//! | [`offpolicy`] | 13 | learning from episodes another policy sampled: importance weights π_old/μ, truncated per token or per sequence, masked; the gap between sampler and learner measured |
//! | [`exchange`] | 13 | trajectories on disk as JSONL (ids, action mask, sampling log-probs, reward, policy version), checked when read |
//! | [`pipeline`] | 13 | rollout systems on a virtual clock: episode shapes, recorded and heavy-tailed latencies, lockstep and independent rollouts as timelines, asynchronous workers and a learner under a staleness bound |
//! | [`service`] | 13 | the gym as a service: the OpenEnv protocol over WebSocket and HTTP, sessions, limits, a load test |
//! | [`packing`] | 14 | several trajectories to a row (first-fit decreasing, a block-diagonal causal mask, restarted positions), the packed forward pass, token slots, micro-batch weights for gradient accumulation |
//! | [`curriculum`] | 14 | pass rates estimated from the policy's own episodes, the chance that a group carries signal, skipping tasks before sampling, a frontier curriculum |
//! | [`finetune`] | 15 | supervised fine-tuning on the oracle's transcripts, rejection-sampling fine-tuning as an algorithm of the loop, the weights that make every method a weighted log-likelihood, the held-out evaluation that methods are compared with |
//! | [`preference`] | 15 | DPO: summed action log-probs, the sigmoid loss with label smoothing against a frozen reference, implicit rewards, their accuracy and margin, success/failure pairs of one task, a DPO training run |
//! | [`distill`] | 16 | a deeper teacher grown from the base model, off-policy distillation as SFT on a teacher's episodes, on-policy distillation (the per-token reverse KL to the teacher on the student's own tokens) as an algorithm of the loop |
//! | [`quixbugs`] | 17 | the QuixBugs benchmark ported to Rhai (39 of its 40 programs, each with its documented one-line defect, its fix as an edit and the benchmark's test cases; the program left out and why), each program as a gym task with public and hidden tests, an issue and a menu of the fix and the gym's line edits |
//! | [`evaluation`] | 17 | frozen task sets, the unbiased pass@k and pass^k, bootstrap intervals over tasks, paired comparisons of checkpoints, tasks needed to see a difference, leakage checks, one report format |
//! | [`debugging`] | 18 | the dashboard (a run's metrics as one figure of panels), bugs injected into the one loop by a config switch and the healthy recipe they break, the trajectory viewer |
//! | [`fuzzing`] | 19 | a grammar-aware fuzzer for the call parser, the environment step and both sandboxed runners: grammars of actions and Rhai sources, mutations, the properties every input must keep, a catalogue of hostile messages |
//! | [`capstone`] | 19 | the capstone run: its task sets (with a validation set), a warm start by SFT, GRPO++ on the hidden-test reward under an exploit monitor, resumable checkpoints, evaluation of every seed on held-out instances, held-out families and QuixBugs, the goals |

pub mod advantage;
pub mod agent;
pub mod bandit;
pub mod book;
pub mod capstone;
pub mod clamp;
pub mod curriculum;
pub mod debugging;
pub mod diagrams;
pub mod distill;
pub mod episode;
pub mod evaluation;
pub mod exchange;
pub mod finetune;
pub mod fuzzing;
pub mod grpo;
pub mod gym;
pub mod horizon;
pub mod mdp;
pub mod mutation;
pub mod offpolicy;
pub mod packing;
pub mod pg;
pub mod pipeline;
pub mod plot;
pub mod policies;
pub mod pomdp;
pub mod ppo;
pub mod preference;
pub mod pretrain;
pub mod quixbugs;
pub mod regularization;
pub mod reward;
pub mod rollout;
pub mod runner;
pub mod sandbox;
pub mod service;
pub mod stats;
pub mod tinyagent;
pub mod tokenizer;
pub mod trajectory;
