"""The upload use case: from received files to a recorded version whose required evaluations are
queued. It builds on both adapters and evaluations, which queue evaluations on adapters' versions,
so it lives above them."""
