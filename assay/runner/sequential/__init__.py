"""Sequential runs: each task's documents in a seeded random order (`order`), scored chunk by
chunk (`run`) and paired with the baseline's per-document scores (`watch`) until the gate
stops the task."""
