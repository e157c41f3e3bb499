"""``gpuscale demo``: the whole pipeline on one machine, against kube-sim."""
