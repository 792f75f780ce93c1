//! Offline tests of the analysis, on this test binary's own files and a fake memory.
