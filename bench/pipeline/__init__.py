"""The pipeline's benchmarks: `kafkalens report`, `ingest` and the report over the table
against their floors (`speed`, `read_floor`, `write_floor`), the report's scan arm by arm
(`scan_cost`), a change before and after (`report_arms`), inputs that must not grow the
driver (`report_inputs`). `python -m bench` lists them."""
