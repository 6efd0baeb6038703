"""``gpunode accept``: ``run.py`` runs it (plan, stage, launch, judge, record); ``options.py``
says what it was asked (light: ``gpunode up`` on ready nodes imports no more of acceptance);
``record.py`` writes what it found."""
