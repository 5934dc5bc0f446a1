"""The local backends: ``local_mt``/``test_mt`` (``threads``) and ``local_mp``/``test_mp``
(``processes``, forked from a warm interpreter by ``process_starter``), with their
resources type ``PythonProcess`` (``resources``).

May import: everything below ``launchers`` and ``launchers.options``; not another backend.
"""
