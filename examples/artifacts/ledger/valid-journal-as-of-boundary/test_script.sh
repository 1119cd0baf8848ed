#!/usr/bin/env bash
python -m unittest -v tests.test_journal tests.test_accounts 2>&1
