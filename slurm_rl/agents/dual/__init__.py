"""The learned dual agent: the ordering agent (squeeze-and-communicate network over the queue)
and the learned placement head over the RWGP's per-GPU-type candidates, the policy bundles
they are saved in (:mod:`.bundle`) and the schedulers built from one (:mod:`.agent`). Our
reconstruction of the KDD 2023 paper's dual agent, whose internals are not public:
docs/ordering-agent.md."""
