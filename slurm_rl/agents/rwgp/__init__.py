"""The placement agent: a Random-Walk Gaussian Process (RWGP) over machines and
fluctuation-aware node-set choice. Our reconstruction of the paper's one-sentence description;
see docs/placement-agent.md."""
