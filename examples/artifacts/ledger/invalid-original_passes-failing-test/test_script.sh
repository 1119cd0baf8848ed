#!/usr/bin/env bash
python -m unittest -v tests.test_journal tests.test_accounts tests.test_account 2>&1
