#!/usr/bin/env bash
python -m unittest -v tests.test_money tests.test_currency 2>&1
