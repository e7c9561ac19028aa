//! Chapter 1: Figure 1.1 (placeholder, being written).
