"""estimator"""
