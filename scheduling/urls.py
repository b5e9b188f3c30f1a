"""Page routes of scheduling, mounted by console.urls."""

from django.urls import path

from scheduling import views

urlpatterns = [
    path("jobs/", views.job_list_page, name="jobs-page"),
    path("jobs/<int:pk>/", views.job_detail_page, name="job-page"),
    path("jobs/<int:pk>/cancel/", views.job_cancel_page, name="job-cancel-page"),
]
