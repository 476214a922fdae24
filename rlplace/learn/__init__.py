"""Learning placers: the training families and the training of the ``learned`` placer
(``rlplace.placers.learned``)."""
