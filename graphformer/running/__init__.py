"""Running a trained model: a run read back from its directory (`loaded.LoadedRun`), for
``graphformer evaluate``, ``graphformer translate`` and the notebooks."""
