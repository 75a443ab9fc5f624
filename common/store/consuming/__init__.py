"""A consumer's writes: claims, outcomes and heartbeats of its attempts, jobs handed back,
blocks, and its browser stack's reports."""
