#!/usr/bin/env bash
python -m unittest -v tests.test_interest tests.test_money 2>&1
