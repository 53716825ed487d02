"""Study declarations as data: the variant grid and each study's claims, declared before the runs."""
