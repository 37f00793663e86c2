"""The codec's benchmarks: decode time and instructions against kio (`decode`,
`instructions`), record batches (`records`), a change decoding exactly as before
(`same`), the mutation fuzzer (`fuzz`), and the golden frames' capture (`capture_golden`).
`python -m bench` lists them."""
