"""The status document a consumer publishes and the producer's probe reads, and the answer a
host gives over SSH."""
