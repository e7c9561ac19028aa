//! `agentrl`: the code that *Agentic RL in Rust* derives, chapter by chapter.
//!
//! Each module names the chapter that introduces it and uses only modules of
//! earlier chapters (or of its own chapter). The chapters show this code by
//! include, so what you read in the book is what runs here.
//!
//! | module | chapter | what it holds |
//! | --- | --- | --- |
//! | [`book`] | 0 | determinism settings and where figures go |
//! | [`sandbox`] | 1 | a limited Rhai engine and the test runner |
//! | [`clamp`] | 1 | the clamp task: issue, sources, tests, edit menu |
//! | [`episode`] | 1 | the call parser, the environment step, scripted and random episodes |
//! | [`plot`] | 1 | line charts for the book's data figures |
//! | [`diagrams`] | 1 | Figure 1.1, the agentic RL loop and the token strip |

pub mod book;
pub mod clamp;
pub mod diagrams;
pub mod episode;
pub mod plot;
pub mod sandbox;
